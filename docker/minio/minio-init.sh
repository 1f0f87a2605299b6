#!/bin/sh
# One-shot set-up of the stack's MinIO (run by the minio-init service, image minio/mc): the bucket, and one user per
# component, each with a policy that reaches only what it needs in that bucket (docs/deploy.md "S3 identities"; the
# same policies as IAM JSON there, kept equal by tests/jobs/test_s3_policies.py); the root account stays for
# administration. Idempotent: safe to run on every `docker compose up`.
#   lander  (the data supplier): writes raw/ only, reads nothing else
#   jobs    (Spark driver and executors): reads raw/, models/, forecast/published/ (what scoring scores); writes
#           runs/ and forecast/scores/ (never models/, never a published forecast)
#   airflow (its tasks: sensor, gate, publication; its task logs): reads everything the DAG reads; writes models/,
#           forecast/, runs/*/scoring/ and logs/ (never raw/, never a job output)
set -eu

mc alias set rossmann http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
mc mb --ignore-existing "rossmann/$ROSSMANN_BUCKET"

B="arn:aws:s3:::$ROSSMANN_BUCKET"
for pair in "$ROSSMANN_S3_LANDER_ACCESS_KEY $ROSSMANN_S3_JOBS_ACCESS_KEY" \
            "$ROSSMANN_S3_LANDER_ACCESS_KEY $ROSSMANN_S3_ACCESS_KEY" "$ROSSMANN_S3_JOBS_ACCESS_KEY $ROSSMANN_S3_ACCESS_KEY"; do
  set -- $pair
  if [ "$1" = "$2" ]; then echo "minio-init: user $1 is named for two components: give each its own" >&2; exit 1; fi
done

# policy NAME USER SECRET: create (or update) policy NAME from stdin and attach it to USER, created with SECRET.
policy() {
  file="$(mktemp)"
  cat >"$file"
  mc admin policy create rossmann "$1" "$file"
  rm -f "$file"
  mc admin user add rossmann "$2" "$3"
  mc admin policy attach rossmann "$1" --user "$2" >/dev/null 2>&1 || true   # already attached on a re-run
  echo "minio-init: user $2 has policy $1"
}

policy rossmann-lander "$ROSSMANN_S3_LANDER_ACCESS_KEY" "$ROSSMANN_S3_LANDER_SECRET_KEY" <<POLICY
{
  "Version": "2012-10-17",
  "Statement": [
    {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": ["$B"],
     "Condition": {"StringLike": {"s3:prefix": ["raw/*"]}}},
    {"Effect": "Allow",
     "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
     "Resource": ["$B/raw/*"]}
  ]
}
POLICY

policy rossmann-jobs "$ROSSMANN_S3_JOBS_ACCESS_KEY" "$ROSSMANN_S3_JOBS_SECRET_KEY" <<POLICY
{
  "Version": "2012-10-17",
  "Statement": [
    {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
     "Resource": ["$B"]},
    {"Effect": "Allow", "Action": ["s3:GetObject"],
     "Resource": ["$B/raw/*", "$B/runs/*", "$B/models/*", "$B/forecast/scores/*", "$B/forecast/published/*"]},
    {"Effect": "Allow",
     "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
     "Resource": ["$B/runs/*", "$B/forecast/scores/*"]}
  ]
}
POLICY

policy rossmann-airflow "$ROSSMANN_S3_ACCESS_KEY" "$ROSSMANN_S3_SECRET_KEY" <<POLICY
{
  "Version": "2012-10-17",
  "Statement": [
    {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"], "Resource": ["$B"]},
    {"Effect": "Allow", "Action": ["s3:GetObject"],
     "Resource": ["$B/raw/*", "$B/runs/*", "$B/models/*", "$B/forecast/*", "$B/logs/*"]},
    {"Effect": "Allow", "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
     "Resource": ["$B/models/*", "$B/forecast/*", "$B/runs/*/scoring/*", "$B/logs/*"]}
  ]
}
POLICY

# Users of earlier versions of this script (one policy for everything) lose it: least privilege from this start on.
mc admin policy detach rossmann rossmann-jobs --user "$ROSSMANN_S3_ACCESS_KEY" >/dev/null 2>&1 || true
echo "minio-init: bucket s3://$ROSSMANN_BUCKET ready (users: lander, jobs, airflow)"
