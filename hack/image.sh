#!/usr/bin/env bash
# `make image`: builds the operator image from the repository's Dockerfile without a container daemon (buildah),
# checks it, and exports it as an OCI archive that `capmaas dev-cluster up --node` imports into containerd.
#
#   hack/image.sh [--tag TAG] [--reuse-wheels]   (default tag: dev; image name localhost/capmaas:TAG)
#   --reuse-wheels: keep build/image/wheels from the previous run (a rebuild from the same sources; tests/pod)
#   SOURCE_DATE_EPOCH: build reproducibly at that time (no layer cache; what `make release` does)
#   CAPMAAS_IMAGE_OUT: the output directory (default build/image; `make release` gives each of its two builds its
#   own, so that they never touch the wheels and archives of the repository's build)
#
# The build is hermetic: the wheels of capmaas and its pinned dependencies are built here on the host (`pip
# wheel`, through whatever index and CA configuration the host has) into build/image/wheels, and the image
# installs only those (`pip install --no-index`); `buildah bud --network=none --pull-never` proves the image build
# itself reaches nothing. The base image is a Debian release made by mmdebstrap (python3, venv, passwd,
# ca-certificates) and imported into buildah's local storage once; the Dockerfile gets it pinned by digest.
#
# Outputs: build/image/capmaas-TAG.oci.tar (an OCI archive whose index names localhost/capmaas:TAG, which is
# what containerd's CRI looks the image up by) and build/image/capmaas-TAG.digest.
#
# Restartable: every output is written under a .partial name and renamed when complete, so an interrupted run
# (Ctrl-C, a full disk, a failed download) leaves nothing that a later run or test takes for finished; a trap
# removes the partial files and the working containers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${CAPMAAS_CACHE:-$HOME/.cache/capmaas}
tag=dev
reuse_wheels=false
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --reuse-wheels) reuse_wheels=true; shift ;;
    *) echo "usage: $0 [--tag TAG] [--reuse-wheels]" >&2; exit 2 ;;
  esac
done
IMAGE=localhost/capmaas:$tag
SUITE=${CAPMAAS_BASE_SUITE:-bookworm}   # Python 3.11, the version the project pins (pyproject: py311)
BASE=localhost/capmaas-base:$SUITE
# The Dockerfile copies build/image/wheels of its build context: with CAPMAAS_IMAGE_OUT the context is a
# directory of its own there (it holds only the wheels), so nothing of the repository's build is touched.
if [ -n "${CAPMAAS_IMAGE_OUT:-}" ]; then out=$CAPMAAS_IMAGE_OUT context=$CAPMAAS_IMAGE_OUT/context
else out=$root/build/image context=$root; fi
wheels=$context/build/image/wheels
pip=${PIP:-$root/.venv/bin/pip}
mkdir -p "$out" "$(dirname "$wheels")"
for tool in buildah mmdebstrap; do
  command -v "$tool" >/dev/null || { echo "image: $tool not found (make image installs it with apt-get)" >&2; exit 2; }
done
t0=$SECONDS

# 1. The base image, once: a minimal Debian with Python. Sources: the host's own apt configuration.
if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  echo "image: making the base $BASE with mmdebstrap (once; about 1.5 minutes) ..."
  sources=${CAPMAAS_APT_SOURCES:-/etc/apt/sources.list.d/debian.sources}
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  mkdir -p "$cache/image"
  # mmdebstrap picks its output format from the file name: the partial file must end in .tar (a name such as
  # base.tar.tmp makes it write a directory). A trap removes what an interrupted or failed run leaves.
  tarball=$cache/image/base-$SUITE.partial.tar
  base_ctr=
  trap 'rm -rf "$tarball"; [ -z "$base_ctr" ] || buildah rm "$base_ctr" >/dev/null 2>&1 || true' EXIT
  rm -rf "$tarball"
  mmdebstrap --quiet --variant=minbase --format=tar \
    --include=python3,python3-venv,python-is-python3,passwd,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"; rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$SUITE" "$tarball" "$sources"
  [ -f "$tarball" ] || { echo "image: mmdebstrap did not write a tar file at $tarball" >&2; exit 1; }
  base_ctr=$(buildah from scratch)
  buildah add --quiet "$base_ctr" "$tarball" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/sh "$base_ctr"
  buildah commit --quiet "$base_ctr" "$BASE" >/dev/null
  buildah rm "$base_ctr" >/dev/null
  base_ctr=
  rm -f "$tarball"
  trap - EXIT
  echo "image: base made in $((SECONDS - t0))s"
fi
base_digest=$(buildah inspect --type image --format '{{.FromImageDigest}}' "$BASE")
case $base_digest in sha256:*) ;; *) echo "image: no digest for $BASE ($base_digest)" >&2; exit 1 ;; esac

# 2. Wheels for capmaas and its runtime dependencies, built on the host (the only step that uses an index).
t1=$SECONDS
if $reuse_wheels && compgen -G "$wheels/capmaas-*.whl" >/dev/null; then
  echo "image: reusing $(ls "$wheels" | wc -l) wheels"
else
  # Into wheels.partial, renamed when pip is done: an interrupted pip leaves no half set that --reuse-wheels
  # (which looks for the capmaas wheel only) would take for complete.
  trap 'rm -rf "$wheels.partial"' EXIT
  rm -rf "$wheels.partial"
  # "$root" is the product's distribution (pyproject.toml); the tools' (tools/pyproject.toml) is never built here.
  "$pip" wheel --quiet --disable-pip-version-check --wheel-dir "$wheels.partial" "$root"
  rm -rf "$wheels"
  mv "$wheels.partial" "$wheels"
  trap - EXIT
  echo "image: $(ls "$wheels" | wc -l) wheels in $((SECONDS - t1))s"
fi

# 3. The image: no network, no pulls, base pinned by digest.
t2=$SECONDS
# SOURCE_DATE_EPOCH (the release build sets the commit time): every layer file's mtime and the created times
# are that time, and no cached layer is reused, so two builds of the same wheels give the same digest.
# --layers keeps a layer per instruction as a cache for the next build (make image, then tests/pod's rebuild
# of the same wheels); a build that reads no cache (--no-cache) is built without it: buildah then commits each
# stage once (the image: the base and one layer) instead of every instruction's layer, the builder stage's
# included, which no later build would read (about 5 s of CPU and 30 s of wall a release build, measured in
# docs/benchmarks/test-durations.md).
build_opts=(--layers)
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  build_opts=(--layers=false --no-cache --timestamp "$SOURCE_DATE_EPOCH"
              --build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH")
fi
buildah bud --quiet --pull-never --network=none --label "org.opencontainers.image.version=$tag" \
  --build-arg "PYTHON_IMAGE=localhost/capmaas-base" --build-arg "PYTHON_DIGEST=$base_digest" "${build_opts[@]}" \
  -f "$root/Dockerfile" -t "$IMAGE" "$context" >/dev/null
echo "image: built $IMAGE in $((SECONDS - t2))s"

# 4. Checks: non-root 65532, the CLI starts, nothing of the image is writable by that user.
user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")
[ "$user" = "65532:65532" ] || { echo "image: USER is '$user', want 65532:65532" >&2; exit 1; }
ctr=$(buildah from --pull-never "$IMAGE")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah run --network=none "$ctr" -- capmaas --help >/dev/null
# shellcheck disable=SC2016  # the $ are for the container's shell
buildah run --network=none "$ctr" -- python -c '
import os, sys
assert (os.getuid(), os.getgid()) == (65532, 65532), (os.getuid(), os.getgid())
bad = [d for d in ("/", "/opt/venv", "/opt/venv/bin", "/usr", "/etc") if os.access(d, os.W_OK)]
sys.exit(f"writable by the operator user: {bad}" if bad else 0)'
buildah rm "$ctr" >/dev/null; trap - EXIT

# 5. Export: an OCI archive carrying the full name, for `ctr -n k8s.io images import`.
# Under .partial.tar names (buildah writes an archive whatever the name; the suffix keeps it a .tar), renamed
# when complete: a push cut short leaves no truncated archive under the name tests/pod imports.
archive=$out/capmaas-$tag.oci.tar
trap 'rm -f "$archive.partial.tar" "$out/capmaas-$tag.digest.partial"' EXIT
rm -f "$archive.partial.tar" "$archive"
buildah push --quiet "$IMAGE" "oci-archive:$archive.partial.tar:$IMAGE" >/dev/null
buildah inspect --type image --format '{{.FromImageDigest}}' "$IMAGE" >"$out/capmaas-$tag.digest.partial"
mv "$archive.partial.tar" "$archive"
mv "$out/capmaas-$tag.digest.partial" "$out/capmaas-$tag.digest"
trap - EXIT
size=$(buildah images --format '{{.Size}}' "$IMAGE" | head -1)
echo "image: $IMAGE ($size) -> $out/capmaas-$tag.oci.tar in $((SECONDS - t0))s total"
