#!/usr/bin/env bash
# Regenerates hack/k8s/go.mod + go.sum for the K8S_VERSION in tools/src/capmaas_dev/devcluster/versions.py.
#
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, k8s.io/apiserver, ...) with ./staging/... paths
# at v0.0.0, so it cannot be required as-is. This reads the pinned release's own go.mod and maps every
# `k8s.io/X => ./staging/src/k8s.io/X` to the published `k8s.io/X v0.<minor>.<patch>`, then runs go mod tidy
# (downloads, no build). Run it after bumping K8S_VERSION; commit go.mod and go.sum.
set -euo pipefail
export GOTOOLCHAIN=local
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's/^K8S_VERSION = "\(.*\)"$/\1/p' "$here/../../tools/src/capmaas_dev/devcluster/versions.py")
[ -n "$version" ] || { echo "gen-gomod: K8S_VERSION not found in versions.py" >&2; exit 2; }
staging=v0.${version#v1.}
out=${1:-$here}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
upstream=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" \
           | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -f "$upstream" ] || { echo "gen-gomod: could not download k8s.io/kubernetes@$version" >&2; exit 1; }

mapfile -t modules < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$upstream" | sort -u)
[ ${#modules[@]} -gt 0 ] || { echo "gen-gomod: no staging replaces found in $upstream" >&2; exit 1; }

go_line=$(sed -n 's/^go \(.*\)$/\1/p' "$upstream")
{
  echo "// Wrapper module: builds kube-apiserver, kube-controller-manager, kube-scheduler and kubelet from k8s.io/kubernetes."
  echo "// k8s.io/kubernetes pins its staging modules to v0.0.0 via local replaces; this maps them to the"
  echo "// published $staging releases. Regenerate with hack/k8s/gen-gomod.sh."
  echo "module capmaas.dev/hack/k8s"
  echo
  echo "go $go_line"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  for m in "${modules[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
  echo ")"
} > "$out/go.mod"
[ -f "$out/tools.go" ] || cp "$here/tools.go" "$out/tools.go"
(cd "$out" && go mod tidy)
echo "gen-gomod: wrote $out/go.mod for k8s.io/kubernetes $version (${#modules[@]} staging modules at $staging)"
