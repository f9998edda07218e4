#!/bin/bash
# The audit image's entrypoint. Spark on Kubernetes starts its pods with one argument
# naming the role and passes the rest in the environment (Spark's Constants: ENV_*):
#   driver ARGS…  the driver pod of `--deploy-mode cluster`: spark-submit in client mode,
#                 bound to the pod's IP (SPARK_DRIVER_BIND_ADDRESS)
#   executor      an executor pod: KubernetesExecutorBackend connecting to SPARK_DRIVER_URL
# Anything else is run as it is (`brokergroup audit …`, a shell).
set -euo pipefail
classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
case "${1:-}" in
  driver)
    shift
    # The audit's session makes SPARK_LOCAL_IP its spark.driver.host (brokergroup_audit
    # .session); executors must reach the pod's own IP, not the default loopback.
    export SPARK_LOCAL_IP=$SPARK_DRIVER_BIND_ADDRESS
    exec tini -s -- "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" --deploy-mode client "$@"
    ;;
  executor)
    shift
    # The driver's JVM options for executors arrive as SPARK_JAVA_OPT_0, _1, … in order.
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | cut -d= -f2-)
    export SPARK_LOCAL_IP=$SPARK_EXECUTOR_POD_IP
    exec tini -s -- java "${java_opts[@]}" \
      "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec "$@"
    ;;
esac
