#!/bin/sh
# Apache Kafka's bin/kafka-run-class.sh, reduced: run a class on the classpath of the jars
# that `make setup` put in jvm/lib/kafka (or $HEADRACE_JVM_LIB/kafka), plus $CLASSPATH
# (librdkafka's tests/java/run-class.sh puts its compiled helpers there).
here=$(cd "$(dirname "$0")" && pwd)
lib=${HEADRACE_JVM_LIB:-$here/../../../../jvm/lib}/kafka
[ -d "$lib" ] || { echo "$0: no Kafka jars in $lib (run make setup or set HEADRACE_JVM_LIB)" >&2; exit 1; }
config=$here/../../../../jvm/kafka/config/log4j2.yaml
[ -f "$config" ] || config=$lib/../../kafka/config/log4j2.yaml
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$config" \
    -cp "${CLASSPATH:+$CLASSPATH:}$lib/*" "$@"
