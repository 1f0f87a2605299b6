# The two README commands are `make demo` and `make test`; everything else is a building block.
.PHONY: setup demo test test-fast ui ui-stop dist executor-env clean

setup:
	bash scripts/setup_env.sh

demo: setup
	bash scripts/demo.sh $(ARGS)

test:
	bash scripts/test.sh

test-fast:  ## skip the slow end-to-end tests
	bash scripts/test.sh -m "not slow"

ui: setup
	bash scripts/airflow_ui.sh

ui-stop:
	bash scripts/airflow_ui.sh --stop

dist:  ## the two wheels (rossmann-forecast: the Airflow side; rossmann-jobs) and the jobs wheel as a zip for --py-files
	mkdir -p dist && rm -f dist/rossmann_jobs.zip dist/*.whl
	bash scripts/build_wheels.sh dist

executor-env: setup  ## the executors' packed Python environment for spark.archives (docs/deploy.md, option 3)
	mkdir -p dist && cp "$$(bash scripts/setup_env.sh --executor-env-archive | tail -n 1)" dist/rossmann-executor-env.tar.gz

clean:
	rm -rf .venvs var dist build
