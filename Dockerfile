# coordinator-server container image.
#
#   docker build -t coordinator-server:0.1.0 .
#   docker run --rm -p 9094:9094 -p 9095:9095 coordinator-server:0.1.0
#
# Every option of `coordinator-server serve` is also an environment variable
# COORDINATOR_<OPTION>; see docs/CONFIGURATION.md and deploy/README.md.

# Both stages start from one stage with Debian's own Python (bookworm's python3, kept patched
# by Debian's security updates): the venv built in the builder links to /usr/bin/python3,
# which the runtime stage has from the very same layer, installed once. The base is plain
# Debian, so a machine without a registry can build it from Debian's archive
# (deploy/images/debian-base.sh).

# --- python-base: Debian's interpreter, the base of both stages below ----------------------
FROM debian:bookworm-slim AS python-base

# The interpreter only: no pip, no compilers, no package lists left behind. The version is
# the release's own, patched by Debian's security updates; pinning it would break the build
# at the next security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*

# --- builder: install the package and its dependencies (uvloop included) into a venv ------
FROM python-base AS builder

# No self-update check: it would only add a network round trip and a warning to the build.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1

# venv's pip, and the C compiler and Python's headers that compile the hot path (setup.py), for
# this stage only: the runtime stage gets the compiled modules, not the tools.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv gcc libc6-dev python3-dev \
    && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/venv
WORKDIR /src

# The dependencies first, in a layer of their own, from the project's list and the pinned
# versions CI tests (constraints.txt): a change to the code alone reuses this layer, and the
# rebuild only installs the package itself.
# The client library's distribution (clients/python) is one of them, installed from the clone
# below: its own dependencies come in here with the server's.
COPY pyproject.toml constraints.txt ./
COPY clients/python/pyproject.toml ./clients/python/
RUN /opt/venv/bin/python -c "import tomllib; print(*(d for p in ('pyproject.toml', 'clients/python/pyproject.toml') for d in tomllib.load(open(p, 'rb'))['project']['dependencies'] if not d.startswith('coordinator-client')), sep='\n')" > requirements.txt \
    && /opt/venv/bin/pip install --no-cache-dir -c constraints.txt -r requirements.txt

# Then the two distributions: the client library's (the wire contract's package with it) and
# the server's, each with the readme it declares. .dockerignore keeps everything else out of
# the build context (the client's tests too). The imports prove, at build time, that the
# entry point and uvloop load on this base and that the hot path was compiled (`-I`: from
# the venv, not from the sources in the working directory). pip and setuptools then leave
# the venv: the server needs neither, and the image carries only what it runs.
COPY clients/python ./clients/python
COPY README.md setup.py ./
COPY coordinator_server ./coordinator_server
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps -c constraints.txt ./clients/python . \
    && /opt/venv/bin/python -I -c "import uvloop, coordinator_server.cli" \
    && /opt/venv/bin/python -I -c "from coordinator_server.compiled import running_build as b; print(b()); assert b().startswith('compiled')" \
    && /opt/venv/bin/pip uninstall --yes --quiet pip setuptools

# --- runtime: the venv on a clean slim base, no build tools, not root ---------------------
FROM python-base AS runtime

# A fixed numeric uid/gid: Kubernetes' runAsNonRoot can only verify a numeric USER, and the
# manifests in deploy/kubernetes/ set the same ids.
ARG UID=10001
ARG GID=10001

RUN groupadd --system --gid "${GID}" coordinator \
    && useradd --system --uid "${UID}" --gid coordinator --no-create-home \
        --home-dir /var/lib/coordinator-server --shell /usr/sbin/nologin coordinator \
    && mkdir -p /var/lib/coordinator-server/data \
    && chown -R "${UID}:${GID}" /var/lib/coordinator-server

COPY --from=builder /opt/venv /opt/venv

# COORDINATOR_HOST: a container is reached through its own interface, never its loopback.
# The data dir is absolute so it does not depend on the working directory; it holds the
# embedded SQLite log, used when no COORDINATOR_BOOTSTRAP_SERVERS is given.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    COORDINATOR_HOST=0.0.0.0 \
    COORDINATOR_PORT=9094 \
    COORDINATOR_METRICS_PORT=9095 \
    COORDINATOR_DATA_DIR=/var/lib/coordinator-server/data

WORKDIR /var/lib/coordinator-server
# Declared once the directory exists and belongs to the user: Docker seeds a new named volume
# from it, ownership included, and would discard changes made under it after this line.
VOLUME ["/var/lib/coordinator-server/data"]

USER ${UID}:${GID}

# 9094: the Kafka-like RPC port; 9095: /metrics, /healthz, /readyz, /status.
EXPOSE 9094 9095

# The slim base has neither curl nor wget, and adding one only for this would grow the image:
# the interpreter that is already there does the request. urlopen raises (exit status 1) on a
# refused connection, a timeout or an error status (503 included). The port follows
# COORDINATOR_METRICS_PORT so the check stays right when it is changed.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('COORDINATOR_METRICS_PORT', '9095'), timeout=3)"]

# SIGTERM (Docker's default stop signal) starts the graceful shutdown; give `docker stop`
# more than COORDINATOR_SHUTDOWN_TIMEOUT_MS (10 s by default), e.g. `docker stop -t 20`.
STOPSIGNAL SIGTERM
ENTRYPOINT ["coordinator-server"]
CMD ["serve"]
