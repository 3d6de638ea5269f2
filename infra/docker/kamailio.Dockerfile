# The SIP edge: Kamailio with the project's configuration (infra/kamailio/kamailio.cfg, the file
# tests/test_kamailio.py runs) in front of the agent workers a DNS name resolves to
# (infra/docker/kamailio-edge.sh keeps the dispatcher list from it).
#
#   docker build -f infra/docker/kamailio.Dockerfile -t collections-sip-edge:0.1.0 .
#   docker run --rm --network host -e WORKERS_HOST=agent.example.internal \
#       -e LISTEN=udp:203.0.113.5:5060 collections-sip-edge:0.1.0
#
# Kamailio is Debian bookworm's package, the version the tests run (make system-test-deps);
# the pin fails the build when Debian replaces it, so a new version is a reviewed change.
# Base image pinned by version tag; add the @sha256 digest where your registry allows.
ARG DEBIAN_IMAGE=debian:12.12-slim

FROM ${DEBIAN_IMAGE}
ARG KAMAILIO_VERSION=5.6.3-2
RUN apt-get update \
 && apt-get install -y --no-install-recommends "kamailio=${KAMAILIO_VERSION}" \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 edge \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin edge \
 && install -d -o 10001 -g 10001 /run/kamailio
COPY infra/kamailio/kamailio.cfg /etc/kamailio/kamailio.cfg
COPY --chmod=755 infra/docker/kamailio-edge.sh /usr/local/bin/kamailio-edge
ENV RUN_DIR=/run/kamailio
USER 10001:10001
EXPOSE 5060/udp
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/kamailio-edge", "--check"]
ENTRYPOINT ["/usr/local/bin/kamailio-edge"]
CMD []
