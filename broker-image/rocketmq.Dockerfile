# Stock Apache RocketMQ 5.3 brokers for `spec.engine: rocketmq` (issue 20 item 4). Built by
# `make image-rocketmq` (tools/rocketmq/image.sh), which puts the broker's jars from Maven
# Central in the build context (lib/) and builds BASE_IMAGE, Debian bookworm with Debian's
# openjdk-17-jre-headless, with debootstrap: nothing is downloaded inside the build.
#
# No RocketMQ shell scripts (mqbroker, runbroker.sh) and no Python: the operator's pod runs
# `java ... org.apache.rocketmq.broker.BrokerStartup -c <conf>` itself, with the JVM options
# and the config generated from the BrokerGroup's spec.
#
#   docker run --read-only --tmpfs /tmp -v store:/data brokergroup-rocketmq:5.3.3 -c /data/broker.conf
ARG BASE_IMAGE=brokergroup-base:bookworm-jre17-headless
FROM ${BASE_IMAGE}
ARG ROCKETMQ_VERSION
COPY lib/ /opt/rocketmq/lib/
# uid 10001 as in the brokergroup image; the store is a volume at /data, logs and the JVM's
# temporary files go to /tmp (an emptyDir in the operator's pods): the root filesystem
# stays read-only.
RUN groupadd --gid 10001 rocketmq \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin rocketmq \
    && mkdir -p /data && chown 10001:10001 /data \
    && java -version
ENV ROCKETMQ_HOME=/opt/rocketmq \
    ROCKETMQ_VERSION=${ROCKETMQ_VERSION}
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
ENTRYPOINT ["java", "-Duser.home=/tmp", "-Djava.io.tmpdir=/tmp", "-Drocketmq.home.dir=/opt/rocketmq", "-cp", "/opt/rocketmq/lib/*", "org.apache.rocketmq.broker.BrokerStartup"]
CMD ["-c", "/data/broker.conf"]
