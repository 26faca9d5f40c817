#!/usr/bin/env bash
# Builds the real Kubernetes binaries capmaas tests against, from Go modules, into a cache outside git, and
# downloads the Cluster API core CRDs. Each item is built/fetched only when missing.
# Usage: hack/build-tools.sh [tool ...]
#   tools: etcd kube-apiserver kube-controller-manager helm capi-crds cluster-api clusterctl
#          kubelet kube-scheduler pause (the one-node cluster of `capmaas dev-cluster up --node`, tests/pod;
#          pause also makes the sandbox image .../image/capmaas-pause-<version>.oci.tar, with buildah)
#   (default: etcd kube-apiserver kube-controller-manager helm capi-crds)
# Cache: $CAPMAAS_CACHE (default ~/.cache/capmaas)/bin/<name>-<version>, .../capi-crds-<version>/*.yaml
# Versions: tools/src/capmaas_dev/devcluster/versions.py is the one source (the Python lookup reads the same file).
# Restartable: each output is written under a temporary name and renamed when complete (the cache checks look
# at the final names only); what an interrupted or failed step leaves is removed by a trap or on the next run.
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
here=$(cd "$(dirname "$0")" && pwd)
cache=${CAPMAAS_CACHE:-$HOME/.cache/capmaas}
bin=$cache/bin
mkdir -p "$bin"

versions_py=$here/../tools/src/capmaas_dev/devcluster/versions.py
version_of() { # NAME -> the value of `NAME = "..."` in versions.py
  local v
  v=$(sed -n "s/^$1 = \"\\(.*\\)\"\$/\\1/p" "$versions_py")
  [ -n "$v" ] || { echo "build-tools: $1 not found in $versions_py" >&2; exit 2; }
  echo "$v"
}
K8S_VERSION=$(version_of K8S_VERSION)
ETCD_VERSION=$(version_of ETCD_VERSION)
HELM_VERSION=$(version_of HELM_VERSION)
CAPI_VERSION=$(version_of CAPI_VERSION)
PAUSE_VERSION=$(version_of PAUSE_VERSION)
k8s_minor=$(echo "$K8S_VERSION" | cut -d. -f2)

# The wrapper modules pin the same releases in their go.mod; refuse to build a binary under the wrong name.
require_in_gomod() { # dir module version
  grep -Eq "^require $2 $3\$|^[[:space:]]$2 $3\$" "$here/$1/go.mod" || {
    echo "build-tools: hack/$1/go.mod does not require $2 $3 (versions.py says $3); update one of them" >&2
    exit 2
  }
}

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${k8s_minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION}"

build() { # name version dir pkg ldflags
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=$5 out="$bin/$1-$2"
  if [ -x "$out" ]; then echo "cached: $out"; return; fi
  echo "building $name $version (cold builds take minutes) ..."
  local start=$SECONDS
  rm -rf "$out.tmp"
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg") || { rm -rf "$out.tmp"; exit 1; }
  mv "$out.tmp" "$out"
  echo "built $out in $((SECONDS - start))s"
}

install_mod() { # name version module-path@version ldflags
  local name=$1 version=$2 pkg=$3 ldflags=$4 out="$bin/$1-$2"
  if [ -x "$out" ]; then echo "cached: $out"; return; fi
  echo "building $name $version ..."
  local start=$SECONDS tmp
  tmp=$(mktemp -d)
  GOBIN=$tmp go install -trimpath -ldflags "$ldflags" "$pkg" || { rm -rf "$tmp"; exit 1; }
  # $tmp is in /tmp, maybe another file system: copy next to the target first, then rename (atomic).
  cp "$tmp"/* "$out.tmp" && mv "$out.tmp" "$out"; rm -rf "$tmp"
  echo "built $out in $((SECONDS - start))s"
}

helm_ldflags() { # as helm's Makefile: without the k8sVersion flags `helm template` claims Kubernetes v1.20
  local gomod minor tmp
  tmp=$(mktemp -d)
  gomod=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "helm.sh/helm/v3@$HELM_VERSION" \
          | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  rmdir "$tmp"
  minor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)
  [ -n "$minor" ] || { echo "build-tools: cannot read helm's client-go version from $gomod" >&2; exit 1; }
  local v="-X helm.sh/helm/v3"
  echo "-s -w $v/internal/version.version=$HELM_VERSION $v/internal/version.gitTreeState=clean" \
       "$v/pkg/lint/rules.k8sVersionMajor=1 $v/pkg/lint/rules.k8sVersionMinor=$minor" \
       "$v/pkg/chartutil.k8sVersionMajor=1 $v/pkg/chartutil.k8sVersionMinor=$minor"
}

capi_crds() { # the core CRDs of sigs.k8s.io/cluster-api, from the Go module cache (a download, no build)
  local out="$cache/capi-crds-$CAPI_VERSION" tmp dir
  if compgen -G "$out/*.yaml" >/dev/null; then echo "cached: $out"; return; fi
  echo "downloading Cluster API $CAPI_VERSION CRDs ..."
  tmp=$(mktemp -d)
  dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  if [ -z "$dir" ] || [ ! -d "$dir/config/crd/bases" ]; then
    (cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION") >&2 || true
    echo "build-tools: could not download sigs.k8s.io/cluster-api@$CAPI_VERSION" >&2; rm -rf "$tmp"; exit 1
  fi
  mkdir -p "$tmp/crds"
  cp "$dir"/config/crd/bases/*.yaml "$tmp/crds/"
  chmod u+w "$tmp"/crds/*.yaml
  rm -rf "$out"; mv "$tmp/crds" "$out"; rm -rf "$tmp"
  echo "copied $(ls "$out" | wc -l) CRDs to $out"
}

pause_image() { # the node's sandbox image: the static pause binary alone, as localhost/capmaas-pause:<version>
  local archive="$cache/image/capmaas-pause-$PAUSE_VERSION.oci.tar" ref="localhost/capmaas-pause:$PAUSE_VERSION"
  if [ -f "$archive" ]; then echo "cached: $archive"; return; fi
  command -v buildah >/dev/null || { echo "build-tools: buildah not found (make node installs it)" >&2; exit 2; }
  mkdir -p "$cache/image"
  local ctr partial="$archive.partial.tar"
  ctr=$(buildah from scratch)
  trap 'buildah rm "'"$ctr"'" >/dev/null 2>&1 || true; rm -f "'"$partial"'"' EXIT
  buildah copy --quiet "$ctr" "$bin/pause-$PAUSE_VERSION" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
  buildah commit --quiet "$ctr" "$ref" >/dev/null
  buildah rm "$ctr" >/dev/null
  rm -f "$partial" "$archive.tmp"  # .tmp: the name an older version of this script used
  buildah push --quiet "$ref" "oci-archive:$partial:$ref" >/dev/null
  mv "$partial" "$archive"
  trap - EXIT
  echo "made $archive"
}

tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(etcd kube-apiserver kube-controller-manager helm capi-crds)
for t in "${tools[@]}"; do
  case $t in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet)
      require_in_gomod k8s k8s.io/kubernetes "$K8S_VERSION"
      build "$t" "$K8S_VERSION" "$here/k8s" "k8s.io/kubernetes/cmd/$t" "$k8s_ldflags" ;;
    etcd)
      require_in_gomod etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
      build etcd "$ETCD_VERSION" "$here/etcd" go.etcd.io/etcd/server/v3 "-s -w" ;;
    helm)
      install_mod helm "$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$(helm_ldflags)" ;;
    capi-crds)
      capi_crds ;;
    pause)
      build pause "$PAUSE_VERSION" "$here/pause" . "-s -w"
      pause_image ;;
    cluster-api)
      install_mod cluster-api "$CAPI_VERSION" "sigs.k8s.io/cluster-api@$CAPI_VERSION" "-s -w" ;;
    clusterctl)
      install_mod clusterctl "$CAPI_VERSION" "sigs.k8s.io/cluster-api/cmd/clusterctl@$CAPI_VERSION" \
        "-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$CAPI_VERSION" ;;
    *) echo "unknown tool: $t" >&2; exit 2 ;;
  esac
done
