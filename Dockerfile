# The guard image: the CronJob, the evidence and conformance Jobs and the node agent (nsenter from util-linux;
# journalctl and lspci are the host's, reached through `nsenter -t 1 -m`).
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends util-linux \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY guard ./guard
COPY jobs ./jobs
# The templates and Xid tables are package data; rendering a Job proves they are in the image.
RUN pip install --no-cache-dir . \
 && gpu-node-guard --version \
 && gpu-node-guard render evidence --node image-build-check >/dev/null

ENV PYTHONUNBUFFERED=1

USER 65532:65532
ENTRYPOINT ["gpu-node-guard"]
CMD ["run"]
