#!/bin/sh
# Runs as sparkjob, started by sudo from docker/airflow/spark-submit: the jobs venv's spark-submit, in sparkjob's
# home, killed with its parent, so that when the task kills its spark-submit (sudo) the driver goes too.
export HOME=/home/sparkjob PATH=/opt/jobs-venv/bin:/usr/local/bin:/usr/bin:/bin
cd "$HOME"
exec setpriv --pdeathsig KILL /opt/jobs-venv/bin/spark-submit "$@"
