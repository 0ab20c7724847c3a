#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft, broker and controller in one process) on
# 127.0.0.1, in the foreground until SIGTERM or SIGINT: for the tests, the bench and local use.
#
#   deploy/kafka/run.sh --port PORT --dir DIR [options]
#   deploy/kafka/run.sh --fetch-only
#
# On first use it fetches Kafka's jars from Maven Central with Maven (pom.xml beside this
# script pins the version) into a cache directory outside git; on the first start in DIR it
# formats the storage there. It prints a line containing "ready" once clients can connect.
#
# Options:
#   --port PORT             the PLAINTEXT listener (required)
#   --dir DIR               data, configuration and logs; kept across restarts (required)
#   --controller-port PORT  the KRaft controller's listener (default: a free port, kept in DIR)
#   --sasl-ssl-port PORT    also a SASL_SSL listener there: TLS with a certificate signed by a
#                           CA generated in DIR/tls (ca.pem), SASL PLAIN, SCRAM-SHA-256 and
#                           SCRAM-SHA-512 for the user below
#   --ssl-port PORT         also an SSL listener there that requires a client certificate
#                           (mutual TLS): the same CA signs DIR/tls/client.pem, whose key is
#                           DIR/tls/client.key (PEM, no password)
#   --sasl-plaintext-port PORT
#                           also a SASL_PLAINTEXT listener there (no TLS), with the SASL users
#                           and mechanisms of --sasl-ssl-port
#   --sasl-user NAME        (default: coordinator)
#   --sasl-password SECRET  (default: coordinator-secret)
#   --cluster-id ID         the cluster id the first start formats the storage with
#                           (default: a random one; Kafka's base64 UUID form)
#   --heap SIZE             the JVM heap (default: 512m)
#   --config KEY=VALUE      a broker setting, added to or replacing the defaults; repeatable
#   --fetch-only            fetch Kafka's jars into the cache (unless there already) and exit
#
# The broker's own PID is written to DIR/broker.pid (to pause it, say); DIR/ready exists while
# the started broker runs (a container's healthcheck tests it).
#
# Environment: COORDINATOR_KAFKA_CACHE overrides the cache directory (default: .cache/ at the
# repository root); JAVA (default: java on PATH) and MVN (default: mvn on PATH); KAFKA_OPTS,
# more options for the JVMs, as Kafka's own scripts take them.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
java="${JAVA:-java}"
mvn="${MVN:-mvn}"

port="" dir="" controller_port="" sasl_ssl_port="" ssl_port="" sasl_plaintext_port=""
sasl_user="coordinator" sasl_password="coordinator-secret" heap="512m" fetch_only="" cluster_id=""
extra_config=()
while [ $# -gt 0 ]; do
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --controller-port) controller_port="$2"; shift 2 ;;
        --sasl-ssl-port) sasl_ssl_port="$2"; shift 2 ;;
        --ssl-port) ssl_port="$2"; shift 2 ;;
        --sasl-plaintext-port) sasl_plaintext_port="$2"; shift 2 ;;
        --sasl-user) sasl_user="$2"; shift 2 ;;
        --sasl-password) sasl_password="$2"; shift 2 ;;
        --cluster-id) cluster_id="$2"; shift 2 ;;
        --heap) heap="$2"; shift 2 ;;
        --config) extra_config+=("$2"); shift 2 ;;
        --fetch-only) fetch_only=1; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$fetch_only" ] && { [ -z "$port" ] || [ -z "$dir" ]; }; then
    echo "run.sh: --port and --dir are required (see --help)" >&2
    exit 2
fi

started_ns="$(date +%s%N)"
elapsed() { echo "$(( ($(date +%s%N) - started_ns) / 1000000 ))"; }

# The classpath: fetched once per Kafka version.
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
cache="${COORDINATOR_KAFKA_CACHE:-$root/.cache}/kafka-$version"
if [ ! -f "$cache/complete" ]; then
    # Brokers started side by side on a machine's first run (a bench and its peer, test
    # processes) fetch one at a time: the others wait on the lock, then find the jars there.
    mkdir -p "$(dirname "$cache")"
    exec 9>"$cache.lock"
    flock 9
    if [ ! -f "$cache/complete" ]; then
        echo "fetching Apache Kafka $version from Maven Central into $cache" >&2
        rm -rf "$cache.partial"
        "$mvn" -q -B -f "$here/pom.xml" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$cache.partial/lib" >&2
        rm -rf "$cache"
        mv "$cache.partial" "$cache"
        touch "$cache/complete"
    fi
    exec 9>&-
fi
if [ -n "$fetch_only" ]; then
    echo "kafka $version fetched into $cache"
    exit 0
fi
# The jars in a fixed (sorted) order: the class-data archive below holds the classpath it was
# made with and is used only with that same one.
classpath="$(printf '%s:' "$cache"/lib/*.jar)"
classpath="${classpath%:}"

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
if [ -z "$controller_port" ]; then
    if [ -f "$dir/controller.port" ]; then
        controller_port="$(cat "$dir/controller.port")"
    else
        controller_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    fi
fi
echo "$controller_port" > "$dir/controller.port"

# TLS material for the SASL_SSL and SSL listeners: a CA of its own and a broker certificate it
# signs, for 127.0.0.1 and localhost. Clients trust DIR/tls/ca.pem.
store_password="broker-store-secret"
tls="$dir/tls"
if [ -n "$sasl_ssl_port$ssl_port" ] && [ ! -f "$dir/tls/broker.p12" ]; then
    tls="$dir/tls"
    rm -rf "$tls"
    mkdir -p "$tls"
    keytool -genkeypair -alias ca -keyalg RSA -keysize 2048 -validity 3650 \
        -dname "CN=coordinator-server test CA" -ext bc:c \
        -keystore "$tls/ca.p12" -storetype PKCS12 -storepass "$store_password" >/dev/null 2>&1
    keytool -exportcert -rfc -alias ca -keystore "$tls/ca.p12" \
        -storepass "$store_password" > "$tls/ca.pem" 2>/dev/null
    keytool -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 3650 \
        -dname "CN=localhost" -keystore "$tls/broker.p12" -storetype PKCS12 \
        -storepass "$store_password" >/dev/null 2>&1
    keytool -certreq -alias broker -keystore "$tls/broker.p12" -storepass "$store_password" \
        2>/dev/null \
        | keytool -gencert -alias ca -keystore "$tls/ca.p12" -storepass "$store_password" \
            -validity 3650 -ext "SAN=dns:localhost,ip:127.0.0.1" -rfc \
            > "$tls/broker.pem" 2>/dev/null
    keytool -importcert -noprompt -alias ca -file "$tls/ca.pem" \
        -keystore "$tls/broker.p12" -storepass "$store_password" >/dev/null 2>&1
    keytool -importcert -noprompt -alias broker -file "$tls/broker.pem" \
        -keystore "$tls/broker.p12" -storepass "$store_password" >/dev/null 2>&1
fi
# A client certificate the same CA signs, for the SSL listener's mutual TLS, as PEM files.
if [ -n "$ssl_port" ] && [ ! -f "$tls/client.key" ]; then
    keytool -genkeypair -alias client -keyalg RSA -keysize 2048 -validity 3650 \
        -dname "CN=coordinator-client" -keystore "$tls/client.p12" -storetype PKCS12 \
        -storepass "$store_password" >/dev/null 2>&1
    keytool -certreq -alias client -keystore "$tls/client.p12" -storepass "$store_password" \
        2>/dev/null \
        | keytool -gencert -alias ca -keystore "$tls/ca.p12" -storepass "$store_password" \
            -validity 3650 -rfc > "$tls/client.pem" 2>/dev/null
    openssl pkcs12 -in "$tls/client.p12" -nocerts -nodes -passin "pass:$store_password" \
        2>/dev/null | openssl pkey -out "$tls/client.key.partial"
    mv "$tls/client.key.partial" "$tls/client.key"
fi

# The broker's settings: one node, one replica, small thread pools for a 2-core machine, and
# groups that start at once (no initial rebalance delay), as the coordinator is configured.
listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port"
advertised="PLAINTEXT://127.0.0.1:$port"
protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
if [ -n "$sasl_ssl_port" ]; then
    listeners="$listeners,SASL_SSL://127.0.0.1:$sasl_ssl_port"
    advertised="$advertised,SASL_SSL://127.0.0.1:$sasl_ssl_port"
    protocols="$protocols,SASL_SSL:SASL_SSL"
fi
if [ -n "$ssl_port" ]; then
    listeners="$listeners,SSL://127.0.0.1:$ssl_port"
    advertised="$advertised,SSL://127.0.0.1:$ssl_port"
    protocols="$protocols,SSL:SSL"
fi
if [ -n "$sasl_plaintext_port" ]; then
    listeners="$listeners,SASL_PLAINTEXT://127.0.0.1:$sasl_plaintext_port"
    advertised="$advertised,SASL_PLAINTEXT://127.0.0.1:$sasl_plaintext_port"
    protocols="$protocols,SASL_PLAINTEXT:SASL_PLAINTEXT"
fi
sasl_listeners=()
[ -n "$sasl_ssl_port" ] && sasl_listeners+=(sasl_ssl)
[ -n "$sasl_plaintext_port" ] && sasl_listeners+=(sasl_plaintext)
properties="$dir/server.properties"
{
    echo "process.roles=broker,controller"
    echo "node.id=1"
    echo "controller.quorum.voters=1@127.0.0.1:$controller_port"
    echo "listeners=$listeners"
    echo "advertised.listeners=$advertised"
    echo "listener.security.protocol.map=$protocols"
    echo "controller.listener.names=CONTROLLER"
    echo "inter.broker.listener.name=PLAINTEXT"
    echo "log.dirs=$dir/data"
    echo "num.partitions=1"
    echo "default.replication.factor=1"
    echo "min.insync.replicas=1"
    echo "offsets.topic.replication.factor=1"
    echo "offsets.topic.num.partitions=50"
    echo "transaction.state.log.replication.factor=1"
    echo "transaction.state.log.min.isr=1"
    echo "share.coordinator.state.topic.replication.factor=1"
    echo "share.coordinator.state.topic.min.isr=1"
    echo "group.initial.rebalance.delay.ms=0"
    # Transactions coordinated outside the brokers (coordinator-server's own): with
    # verification on, a broker asks its own transaction coordinator, which knows nothing of
    # them, whether a transactional batch's partition is in its transaction, and refuses it.
    echo "transaction.partition.verification.enable=false"
    echo "num.network.threads=2"
    echo "num.io.threads=2"
    echo "background.threads=2"
    echo "num.recovery.threads.per.data.dir=1"
    echo "log.cleaner.threads=1"
    echo "log.cleaner.dedupe.buffer.size=16777216"
    if [ -n "$sasl_ssl_port$ssl_port" ]; then
        echo "ssl.keystore.type=PKCS12"
        echo "ssl.keystore.location=$dir/tls/broker.p12"
        echo "ssl.keystore.password=$store_password"
        echo "ssl.key.password=$store_password"
    fi
    if [ -n "$ssl_port" ]; then
        # The CA is a trusted entry of the broker's own store.
        echo "ssl.truststore.type=PKCS12"
        echo "ssl.truststore.location=$dir/tls/broker.p12"
        echo "ssl.truststore.password=$store_password"
        echo "listener.name.ssl.ssl.client.auth=required"
    fi
    if [ ${#sasl_listeners[@]} -gt 0 ]; then
        echo "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    fi
    for listener in "${sasl_listeners[@]+"${sasl_listeners[@]}"}"; do
        echo "listener.name.$listener.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_${sasl_user}=\"${sasl_password}\";"
        echo "listener.name.$listener.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
        echo "listener.name.$listener.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
    done
    for setting in "${extra_config[@]+"${extra_config[@]}"}"; do
        echo "$setting"
    done
} > "$properties"

cat > "$dir/log4j2.yaml" <<'YAML'
Configuration:
  Appenders:
    Console:
      name: STDERR
      target: SYSTEM_ERR
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDERR
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
YAML

jvm=(
    "-Xms$heap" "-Xmx$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$dir/log4j2.yaml"
)
if [ -n "${KAFKA_OPTS:-}" ]; then
    read -r -a kafka_opts <<< "$KAFKA_OPTS"
    jvm+=("${kafka_opts[@]}")
fi

# Application class-data sharing (JDK 13+): the classes a broker loaded, parsed and verified
# once, mapped by every later start of this Kafka on this JVM. A start then takes 3.2 s
# instead of 5.7 s and half the CPU (4 s instead of 9 s with the storage format); a running
# broker is the same. The first broker to stop cleanly writes the archive (as it exits, a few
# seconds); one at a time, into a temporary name renamed once complete. The JVM itself
# ignores an archive of another JVM build, so the name only keeps builds apart.
java_path="$(command -v "$java" || echo "$java")"
java_id="$(stat -L -c '%s-%Y' "$java_path" 2>/dev/null || echo unknown)"
archive="$cache/cds/broker-$(printf '%s %s' "$(readlink -f "$java_path")" "$java_id" | cksum | cut -d' ' -f1).jsa"
archive_pending=""
if [ -f "$archive" ]; then
    jvm+=("-XX:SharedArchiveFile=$archive")
elif mkdir -p "$cache/cds" 2>/dev/null && [ -w "$cache/cds" ]; then
    exec 8>"$archive.lock"
    if flock -n 8; then
        # What a launcher killed while its broker wrote would have left behind.
        rm -f "$archive".[0-9]*
        archive_pending="$archive.$$"
    else
        exec 8>&-
    fi
fi

if [ ! -f "$dir/data/meta.properties" ]; then
    scram=()
    if [ ${#sasl_listeners[@]} -gt 0 ]; then
        scram=(
            --add-scram "SCRAM-SHA-256=[name=$sasl_user,password=$sasl_password]"
            --add-scram "SCRAM-SHA-512=[name=$sasl_user,password=$sasl_password]"
        )
    fi
    # A cluster id as Kafka's `StorageTool random-uuid` makes one (16 random bytes, base64url
    # without padding, not starting with "-"), without a JVM start of its own for it.
    if [ -z "$cluster_id" ]; then
        cluster_id="$(python3 -c 'import base64, os
while True:
    uuid = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
    if not uuid.startswith("-"):
        print(uuid)
        break')"
    fi
    "$java" "${jvm[@]}" -cp "$classpath" kafka.tools.StorageTool format \
        --config "$properties" --cluster-id "$cluster_id" \
        "${scram[@]+"${scram[@]}"}" --ignore-formatted >&2
fi

rm -f "$dir/ready"
# The broker's output goes on to stderr; the line saying it started becomes the ready line.
tls_ports="$sasl_ssl_port$ssl_port"
announce() {
    while IFS= read -r line; do
        printf '%s\n' "$line" >&2
        case "$line" in
            *"Kafka Server started"*)
                touch "$dir/ready"
                echo "kafka $version ready on 127.0.0.1:$port in $(elapsed) ms" \
                    "(controller 127.0.0.1:$controller_port${sasl_ssl_port:+, SASL_SSL 127.0.0.1:$sasl_ssl_port}${ssl_port:+, SSL 127.0.0.1:$ssl_port}${sasl_plaintext_port:+, SASL_PLAINTEXT 127.0.0.1:$sasl_plaintext_port}${tls_ports:+, CA $dir/tls/ca.pem})"
                ;;
        esac
    done
}
dump=()
if [ -n "$archive_pending" ]; then
    dump=("-XX:ArchiveClassesAtExit=$archive_pending")
fi
"$java" "${jvm[@]}" "${dump[@]+"${dump[@]}"}" -cp "$classpath" kafka.Kafka "$properties" \
    > >(announce) 2>&1 8>&- &
broker=$!
# Whoever started this script may pause the broker itself (SIGSTOP), not the script.
echo "$broker" > "$dir/broker.pid"
stop() { kill -TERM "$broker" 2>/dev/null || true; }
trap stop TERM INT

status=0
wait "$broker" || status=$?
# A signal interrupts the first wait; the second waits for the broker's own exit.
if kill -0 "$broker" 2>/dev/null; then
    wait "$broker" || status=$?
fi
rm -f "$dir/ready"
if [ -n "$archive_pending" ]; then
    # Written whole only by a JVM that exited on its own (143 after SIGTERM), not killed.
    if { [ "$status" -eq 0 ] || [ "$status" -eq 143 ]; } && [ -s "$archive_pending" ]; then
        mv -f "$archive_pending" "$archive"
    else
        rm -f "$archive_pending"
    fi
fi
exit "$status"
