#!/usr/bin/env bash
# Builds the Go provider (spectrocloud/cluster-api-provider-maas) from a source tree you give it, for the
# side-by-side benchmark `python -m capmaas_dev.bench.goprovider` (docs/benchmarks/go-provider.md). Nothing of
# the provider's or its MAAS client's source enters this repository: the trees are copied into the cache and
# built there.
#
# Usage: hack/go-provider.sh [PROVIDER_SRC [CLIENT_SRC]]
#   PROVIDER_SRC (or $CAPMAAS_GO_PROVIDER_SRC): the provider's source, either a directory holding its tree
#     (go.mod at the top) or GITDIR@REV: a git repository (bare or not) and the revision to take from it.
#   CLIENT_SRC (or $CAPMAAS_MAAS_CLIENT_SRC), optional: spectrocloud/maas-client-go the same way. When given,
#     the build's go.mod replaces the client version the provider pins by this tree (needed when that version
#     cannot be downloaded); when not, the pinned version is downloaded as any other module.
#   $CAPMAAS_GO_PROVIDER_TOOLCHAIN: the Go toolchain (GOTOOLCHAIN value); default: the version the provider's
#     Dockerfile builds its image with (`FROM golang:X`), "local" for the Go on PATH.
# Output: $CAPMAAS_CACHE (default ~/.cache/capmaas)/bin/go-provider-<provider rev>[-client-<client rev>]-<go>
# and, beside it, <same>.json (provenance: revisions, toolchain, source paths). The last line printed is the path.
set -euo pipefail
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

cache=${CAPMAAS_CACHE:-$HOME/.cache/capmaas}
provider_src=${1:-${CAPMAAS_GO_PROVIDER_SRC:-}}
client_src=${2:-${CAPMAAS_MAAS_CLIENT_SRC:-}}
client_module=github.com/spectrocloud/maas-client-go

die() { echo "go-provider: $*" >&2; exit 2; }

if [ -z "$provider_src" ]; then
  die "no provider source given. Pass PROVIDER_SRC (or set CAPMAAS_GO_PROVIDER_SRC): a directory with a
  checkout of spectrocloud/cluster-api-provider-maas, or GITDIR@REV of a clone (bare or not), e.g.
    git clone --bare <the provider's git URL> /srv/src/capmaas-go.git
    hack/go-provider.sh /srv/src/capmaas-go.git@main
  If its pinned $client_module version cannot be downloaded, also pass CLIENT_SRC the same way
  (a checkout or GITDIR@REV of spectrocloud/maas-client-go). See docs/benchmarks/go-provider.md."
fi
command -v go >/dev/null || die "go is not on PATH"

work=$(mktemp -d "${TMPDIR:-/tmp}/capmaas-go-provider.XXXXXX")
trap 'rm -rf "$work"' EXIT

# unpack SRC DEST: copy a source tree (directory or GITDIR@REV) into DEST; prints its revision label.
unpack() {
  local src=$1 dest=$2
  mkdir -p "$dest"
  if [ -d "$src" ] && [ -f "$src/go.mod" ]; then
    (cd "$src" && tar -c --exclude=.git .) | tar -x -C "$dest"
    if git -C "$src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
      local rev dirty=""
      rev=$(git -C "$src" rev-parse --short=7 HEAD)
      [ -z "$(git -C "$src" status --porcelain 2>/dev/null)" ] || dirty=-dirty
      echo "$rev$dirty"
    else # not a git checkout: a digest of the files names the tree
      echo "tree-$(cd "$dest" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)"
    fi
  elif [[ "$src" == *@* ]]; then
    local gitdir=${src%@*} rev=${src##*@}
    git -C "$gitdir" rev-parse --verify -q "$rev^{commit}" >/dev/null \
      || die "$gitdir has no revision $rev (git -C $gitdir log --oneline $rev)"
    git -C "$gitdir" archive "$rev" | tar -x -C "$dest"
    git -C "$gitdir" rev-parse --short=7 "$rev^{commit}"
  else
    die "$src is neither a source directory (with go.mod) nor GITDIR@REV"
  fi
}

echo "go-provider: copying the provider's source from $provider_src"
provider_rev=$(unpack "$provider_src" "$work/provider")
[ "$(sed -n 's/^module //p' "$work/provider/go.mod")" = github.com/spectrocloud/cluster-api-provider-maas ] \
  || die "$provider_src is not spectrocloud/cluster-api-provider-maas (module line of its go.mod)"
pinned_client=$(sed -n "s|^[[:space:]]*$client_module \\(v[^ ]*\\).*|\\1|p" "$work/provider/go.mod" | head -1)
name="go-provider-$provider_rev"
client_rev=""
if [ -n "$client_src" ]; then
  echo "go-provider: copying the MAAS client's source from $client_src"
  client_rev=$(unpack "$client_src" "$work/client")
  [ "$(sed -n 's/^module //p' "$work/client/go.mod")" = "$client_module" ] \
    || die "$client_src is not $client_module (module line of its go.mod)"
  name="$name-client-$client_rev"
  (cd "$work/provider" && go mod edit -replace "$client_module=$work/client")
fi

toolchain=${CAPMAAS_GO_PROVIDER_TOOLCHAIN:-}
if [ -z "$toolchain" ]; then
  v=$(sed -n 's/^FROM golang:\([0-9.]*\).*/\1/p' "$work/provider/Dockerfile" 2>/dev/null | head -1)
  toolchain=${v:+go$v}
  toolchain=${toolchain:-local}
fi
export GOTOOLCHAIN=$toolchain
go_version=$(cd "$work/provider" && go env GOVERSION)
name="$name-$go_version"

bin=$cache/bin
out="$bin/$name"
mkdir -p "$bin"

# The DaemonSet template the manager embeds (go:embed) is made by its Makefile from a template with the
# initializer image substituted; the benchmark never deploys it (no LXD), so any image name does.
tmpl=$work/provider/controllers/templates/lxd_initializer_ds.yaml
if [ -f "$tmpl" ] && [ ! -f "$tmpl.processed" ]; then
  sed 's|\${LXD_INITIALIZER_IMAGE}|lxd-initializer:not-deployed-by-the-benchmark|' "$tmpl" > "$tmpl.processed"
fi

echo "go-provider: building the manager ($go_version, provider $provider_rev${client_rev:+, client $client_rev})"
start=$SECONDS
# As the provider's Dockerfile builds it (CGO off, the main package), -mod=mod so a replaced client's
# go.sum lines are added in the build copy.
(cd "$work/provider" && go build -mod=mod -trimpath -o "$out.tmp" .) || { rm -f "$out.tmp"; exit 1; }
mv "$out.tmp" "$out"
cat > "$out.json" <<EOF
{
  "provider_source": "$provider_src",
  "provider_revision": "$provider_rev",
  "client_module": "$client_module",
  "client_pinned": "$pinned_client",
  "client_source": "$client_src",
  "client_revision": "$client_rev",
  "go": "$go_version",
  "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
EOF
echo "go-provider: built in $((SECONDS - start))s; provenance in $out.json"
echo "$out"
