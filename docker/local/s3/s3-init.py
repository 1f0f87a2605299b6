"""One-shot set-up of the local S3 server (docker-compose.local-s3.yaml's minio-init): the stack's bucket.

moto accepts any keys and enforces no policy, so unlike docker/minio/minio-init.sh there is no user to create and
the least-privilege identities are not enforced (try-out only); the bucket is made with Airflow's keys. Idempotent."""
import os

import boto3

s3 = boto3.client("s3", endpoint_url="http://minio:9000", region_name="us-east-1",
                  aws_access_key_id=os.environ["ROSSMANN_S3_ACCESS_KEY"],
                  aws_secret_access_key=os.environ["ROSSMANN_S3_SECRET_KEY"])
bucket = os.environ["ROSSMANN_BUCKET"]
try:
    s3.create_bucket(Bucket=bucket)
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
print(f"s3-init: bucket s3://{bucket} ready on the local S3 server")
