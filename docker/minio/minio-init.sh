#!/bin/sh
# One-shot set-up of the stack's MinIO (run by the minio-init service, image minio/mc): the bucket, and a user for
# Airflow and the jobs whose policy reaches only that bucket; the root account stays for administration.
# Idempotent: safe to run on every `docker compose up`.
set -eu

mc alias set rossmann http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
mc mb --ignore-existing "rossmann/$ROSSMANN_BUCKET"

policy_file="$(mktemp)"
cat >"$policy_file" <<POLICY
{
  "Version": "2012-10-17",
  "Statement": [
    {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
     "Resource": ["arn:aws:s3:::$ROSSMANN_BUCKET"]},
    {"Effect": "Allow",
     "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts"],
     "Resource": ["arn:aws:s3:::$ROSSMANN_BUCKET/*"]}
  ]
}
POLICY
mc admin policy create rossmann rossmann-jobs "$policy_file"
rm -f "$policy_file"
mc admin user add rossmann "$ROSSMANN_S3_ACCESS_KEY" "$ROSSMANN_S3_SECRET_KEY"
mc admin policy attach rossmann rossmann-jobs --user "$ROSSMANN_S3_ACCESS_KEY"
echo "minio-init: bucket s3://$ROSSMANN_BUCKET and user $ROSSMANN_S3_ACCESS_KEY (policy rossmann-jobs) ready"
