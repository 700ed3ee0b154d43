# Build wheels in one stage, install them in a slim runtime stage with no build tools.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
# pip goes too once it has installed the wheels: nothing in the image can build or fetch code.
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && pip uninstall --yes pip
# Numeric non-root user, so runAsNonRoot can be verified by the kubelet.
USER 65532:65532
EXPOSE 9443 8080
# Certificates are read from /tmp/k8s-webhook-server/serving-certs/tls.{crt,key} by default
# (the controller-runtime convention) and reloaded when they change.
ENTRYPOINT ["python", "-m", "webhook", "serve"]
