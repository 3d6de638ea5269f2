#!/bin/sh
# The SIP edge's entrypoint (infra/docker/kamailio.Dockerfile): Kamailio with the project's
# kamailio.cfg (infra/kamailio/) in front of the agent workers that one DNS name resolves to,
# in Kubernetes the workers' headless Service (infra/k8s/base/agent-sip-service.yaml).
#
# Kamailio's dispatcher reads a list file of workers, so this script writes that list from
# the name's addresses (one line per worker: "1 sip:ADDRESS:WORKERS_PORT 0"), starts Kamailio,
# resolves the name again every SYNC_INTERVAL seconds and, when the addresses changed, rewrites
# the list and restarts Kamailio: the procedure infra/kamailio/README.md gives for adding or
# removing workers (Kamailio keeps no dialog state, so answered calls carry on). Whether a
# listed worker takes calls is Kamailio's own OPTIONS probing.
#
#   kamailio-edge [KAMAILIO_OPTION ...]   e.g. -A PING_INTERVAL=2
#   kamailio-edge --check                 exit 0 while Kamailio runs (the health check)
#
# Environment (defaults in brackets):
#   WORKERS_HOST   the DNS name of the workers [required]
#   WORKERS_PORT   their SIP port [5060]
#   LISTEN         Kamailio's listen socket [udp:0.0.0.0:5060]
#   ADVERTISE      the address:port to put in Via and Record-Route instead (behind 1:1 NAT) []
#   SYNC_INTERVAL  seconds between resolutions [10]
#   KAMAILIO_CFG   [/etc/kamailio/kamailio.cfg]
#   RUN_DIR        a writable directory: the list, the pid file, Kamailio's run files
#                  [/run/kamailio]
set -eu

RUN_DIR=${RUN_DIR:-/run/kamailio}
PID_FILE=$RUN_DIR/kamailio.pid

if [ "${1:-}" = "--check" ]; then
    [ -s "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null
    exit
fi

: "${WORKERS_HOST:?set WORKERS_HOST to the DNS name of the agent workers}"
WORKERS_PORT=${WORKERS_PORT:-5060}
LISTEN=${LISTEN:-udp:0.0.0.0:5060}
SYNC_INTERVAL=${SYNC_INTERVAL:-10}
KAMAILIO_CFG=${KAMAILIO_CFG:-/etc/kamailio/kamailio.cfg}
KAMAILIO=${KAMAILIO:-kamailio}
LIST=$RUN_DIR/dispatcher.list
if [ -n "${ADVERTISE:-}" ]; then
    LISTEN="$LISTEN advertise $ADVERTISE"
fi

log() {
    echo "kamailio-edge: $*" >&2
}

# Write the list from the name's IPv4 addresses; status 0 when it changed.
write_list() {
    {
        echo "# dispatcher set 1: $WORKERS_HOST, written by kamailio-edge"
        getent ahostsv4 "$WORKERS_HOST" | awk '{ print $1 }' | sort -u |
            while read -r address; do
                echo "1 sip:$address:$WORKERS_PORT 0"
            done
    } >"$LIST.new" || true
    if [ -f "$LIST" ] && cmp -s "$LIST.new" "$LIST"; then
        rm -f "$LIST.new"
        return 1
    fi
    mv "$LIST.new" "$LIST"
    log "workers: $(grep -c '^1 ' "$LIST" || true) ($WORKERS_HOST)"
    return 0
}

kamailio_pid=
start() {
    "$KAMAILIO" -f "$KAMAILIO_CFG" -DD -E -Y "$RUN_DIR" -P "$PID_FILE" \
        -A "LISTEN=$LISTEN" -A "DISPATCHER_LIST=\"$LIST\"" "$@" &
    kamailio_pid=$!
}
stop() {
    if [ -n "$kamailio_pid" ]; then
        kill -TERM "$kamailio_pid" 2>/dev/null || true
        wait "$kamailio_pid" 2>/dev/null || true
        kamailio_pid=
    fi
    rm -f "$PID_FILE"
}
trap 'stop; exit 0' TERM INT

mkdir -p "$RUN_DIR"
write_list || true
start "$@"
while :; do
    sleep "$SYNC_INTERVAL" &
    wait $! || true
    if ! kill -0 "$kamailio_pid" 2>/dev/null; then
        status=0
        wait "$kamailio_pid" || status=$?
        log "kamailio exited (status $status)"
        exit "$status"
    fi
    if write_list; then
        log "restarting kamailio for the new list"
        stop
        start "$@"
    fi
done
