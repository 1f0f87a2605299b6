# Sourced by both images' entrypoints. Where the container is given SPARK_AUTH_SECRET (the Spark master, the
# workers, the scheduler that runs the drivers), writes the Spark settings that need it into
# $SPARK_CONF_DIR/spark-defaults.conf, readable by this user only (and the group SPARK_CONF_GROUP, if set), and
# drops the secret from the environment, so that neither the daemon, nor spark-submit, nor anything they start
# finds it there (executors get it from their worker, as Spark's standalone mode does). Every Spark process reads
# that file: RPC authenticated and encrypted, no application UI.
write_spark_auth_conf() {
  if [[ -z "${SPARK_AUTH_SECRET:-}" ]]; then
    return 0
  fi
  : "${SPARK_CONF_DIR:?SPARK_CONF_DIR must name the folder for spark-defaults.conf}"
  (umask 077 && mkdir -p "$SPARK_CONF_DIR" && chmod 700 "$SPARK_CONF_DIR" \
    && printf '%s\n' "spark.authenticate true" "spark.authenticate.secret ${SPARK_AUTH_SECRET}" \
       "spark.network.crypto.enabled true" "spark.ui.enabled false" > "$SPARK_CONF_DIR/spark-defaults.conf")
  if [[ -n "${SPARK_CONF_GROUP:-}" ]]; then   # the drivers run as another user of this group (docker/airflow)
    chgrp "$SPARK_CONF_GROUP" "$SPARK_CONF_DIR" "$SPARK_CONF_DIR/spark-defaults.conf"
    chmod 750 "$SPARK_CONF_DIR" && chmod 640 "$SPARK_CONF_DIR/spark-defaults.conf"
  fi
  unset SPARK_AUTH_SECRET
}
