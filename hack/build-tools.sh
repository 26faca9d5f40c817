#!/usr/bin/env bash
# Builds the real Kubernetes binaries capmaas tests against, from Go modules, into a cache outside git.
# Each binary is built only when missing. Usage: hack/build-tools.sh [tool ...]
#   tools: kube-apiserver kube-controller-manager etcd helm cluster-api clusterctl (default: the first four)
# Cache: $CAPMAAS_CACHE (default ~/.cache/capmaas)/bin/<name>-<version>
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
here=$(cd "$(dirname "$0")" && pwd)
cache=${CAPMAAS_CACHE:-$HOME/.cache/capmaas}
bin=$cache/bin
mkdir -p "$bin"

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.21.4
CAPI_VERSION=v1.13.6  # v1.13.7 is refused by the module proxy (403 "not available")

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION}"

build() { # name version dir pkg ldflags
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=$5 out="$bin/$1-$2"
  if [ -x "$out" ]; then echo "cached: $out"; return; fi
  echo "building $name $version (cold builds take minutes) ..."
  local start=$SECONDS
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"
  echo "built $out in $((SECONDS - start))s"
}

install_mod() { # name version module-path@version ldflags
  local name=$1 version=$2 pkg=$3 ldflags=$4 out="$bin/$1-$2"
  if [ -x "$out" ]; then echo "cached: $out"; return; fi
  echo "building $name $version ..."
  local start=$SECONDS tmp
  tmp=$(mktemp -d)
  GOBIN=$tmp go install -trimpath -ldflags "$ldflags" "$pkg"
  mv "$tmp"/* "$out"; rmdir "$tmp"
  echo "built $out in $((SECONDS - start))s"
}

tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(etcd kube-apiserver helm kube-controller-manager)
for t in "${tools[@]}"; do
  case $t in
    kube-apiserver|kube-controller-manager)
      build "$t" "$K8S_VERSION" "$here/k8s" "k8s.io/kubernetes/cmd/$t" "$k8s_ldflags" ;;
    etcd)
      build etcd "$ETCD_VERSION" "$here/etcd" go.etcd.io/etcd/server/v3 "-s -w" ;;
    helm)
      install_mod helm "$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
        "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" ;;
    cluster-api)
      install_mod cluster-api "$CAPI_VERSION" "sigs.k8s.io/cluster-api@$CAPI_VERSION" "-s -w" ;;
    clusterctl)
      install_mod clusterctl "$CAPI_VERSION" "sigs.k8s.io/cluster-api/cmd/clusterctl@$CAPI_VERSION" \
        "-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$CAPI_VERSION" ;;
    *) echo "unknown tool: $t" >&2; exit 2 ;;
  esac
done
