# The project and its locked dependencies (requirements/image.txt, `make lock`) in a virtualenv,
# built in one stage and copied alone into a slim runtime stage with no build tools.
# The base is taken by tag; to pin it, pass its digest (README: Building the image):
#   --build-arg PYTHON_IMAGE=python:3.12-slim@sha256:<digest>
# The lock is made for this Python (3.12): a base with another Python needs `make lock` redone.
ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python -m venv --without-pip /opt/venv
# Only what the lock pins, each file checked against its hash, wheels only.
COPY requirements/image.txt /tmp/image.txt
RUN pip --python /opt/venv/bin/python install --require-hashes --no-deps --only-binary :all: -r /tmp/image.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
# The project's own wheel on top, without dependencies: all of them come from the lock, and
# `pip check` fails the build if the lock missed one (of the project or of a locked package).
RUN pip wheel --no-deps --wheel-dir /tmp/dist . \
    && pip --python /opt/venv/bin/python install --no-deps /tmp/dist/*.whl \
    && pip --python /opt/venv/bin/python check

FROM ${PYTHON_IMAGE}
# Nothing in the image can fetch or install code: the base's pip, its links and ensurepip (with
# its bundled pip wheel) go, and setuptools and wheel where an older base ships them; the build
# fails if pip or ensurepip can still be imported. This hides them without shrinking the base's
# own layer.
RUN stdlib="$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
    && site="$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    && rm -rf "$stdlib/ensurepip" "$site"/pip "$site"/pip-*.dist-info "$site"/setuptools "$site"/setuptools-*.dist-info \
       "$site"/wheel "$site"/wheel-*.dist-info "$site"/pkg_resources "$site"/_distutils_hack \
       "$site"/distutils-precedence.pth /usr/local/bin/pip* \
    && python -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ("pip", "ensurepip")))'
COPY --from=build /opt/venv /opt/venv
# HOME: the user below has no passwd entry, and not every runtime sets HOME for it.
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/
# Numeric non-root user, so runAsNonRoot can be verified by the kubelet.
USER 65532:65532
EXPOSE 9443 8080
# Certificates are read from /tmp/k8s-webhook-server/serving-certs/tls.{crt,key} by default
# (the controller-runtime convention) and reloaded when they change.
ENTRYPOINT ["python", "-m", "webhook", "serve"]
