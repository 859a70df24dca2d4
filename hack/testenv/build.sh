#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries that internal/testenv runs, from
# their Go modules, into .cache/testenv/bin. Idempotent: when both binaries
# exist and the stamp records the same versions, it does nothing.
#
# Needs only Go and a reachable module proxy. Versions can be overridden:
#   KUBE_VERSION=v1.34.4 hack/testenv/build.sh
# The staging modules (k8s.io/api, k8s.io/apiserver, ...) are pinned to the
# matching v0.x.y; the etcd version is the one Kubernetes itself requires.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
cache="${TESTENV_CACHE:-${root}/.cache/testenv}"
bin="${cache}/bin"
src="${cache}/src"
stamp="${bin}/versions"

export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf 'testenv: %s\n' "$*"; }

# kube_go_mod prints the path of Kubernetes' go.mod in the module cache,
# downloading the module if needed. It runs in a scratch module of its own so
# that no other go.mod (the repository's) is consulted or touched.
kube_go_mod() {
	local scratch json
	scratch="$(mktemp -d)"
	printf 'module bulwark.test/testenv-resolve\n\ngo 1.24.0\n' >"${scratch}/go.mod"
	json="$(cd "${scratch}" && go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}")"
	rm -rf "${scratch}"
	sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"${json}"
}

# etcd_version prints the etcd server version Kubernetes requires.
etcd_version() {
	awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$1"
}

# staging_modules prints the k8s.io modules Kubernetes replaces with its
# staging directories; each must be pinned to the matching release.
staging_modules() {
	awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$1"
}

mkdir -p "${cache}" "${bin}"

# up_to_date reports whether both binaries exist and the stamp records the
# wanted Kubernetes version and platform (and etcd version, when one is
# asked for). It needs no network, so later runs cost nothing.
up_to_date() {
	[[ -x "${bin}/kube-apiserver" && -x "${bin}/etcd" && -f "${stamp}" ]] || return 1
	grep -qxF "kube-apiserver ${KUBE_VERSION}" "${stamp}" || return 1
	grep -qxF "platform $(go env GOOS)/$(go env GOARCH)" "${stamp}" || return 1
	[[ -z "${ETCD_VERSION:-}" ]] || grep -qxF "etcd ${ETCD_VERSION}" "${stamp}"
}

if up_to_date; then
	log "up to date in ${bin}: $(tr '\n' ' ' <"${stamp}")"
	exit 0
fi

log "resolving k8s.io/kubernetes ${KUBE_VERSION}"
kmod="$(kube_go_mod)"
if [[ -z "${kmod}" || ! -f "${kmod}" ]]; then
	echo "testenv: cannot find go.mod of k8s.io/kubernetes@${KUBE_VERSION}" >&2
	exit 1
fi
ETCD_VERSION="${ETCD_VERSION:-$(etcd_version "${kmod}")}"
if [[ -z "${ETCD_VERSION}" ]]; then
	echo "testenv: k8s.io/kubernetes@${KUBE_VERSION} does not require go.etcd.io/etcd/server/v3" >&2
	exit 1
fi

want="kube-apiserver ${KUBE_VERSION}
etcd ${ETCD_VERSION}
platform $(go env GOOS)/$(go env GOARCH)"

log "building kube-apiserver ${KUBE_VERSION} and etcd ${ETCD_VERSION} into ${bin}"

log "writing build module in ${src}"
rm -rf "${src}"
mkdir -p "${src}/etcd"
{
	sed -e "s/@KUBE_VERSION@/${KUBE_VERSION}/" \
		-e "s/@ETCD_VERSION@/${ETCD_VERSION}/" \
		"${here}/go.mod.in"
	echo
	echo "replace ("
	staging_modules "${kmod}" | while read -r m; do
		printf '\t%s => %s %s\n' "${m}" "${m}" "${STAGING_VERSION}"
	done
	echo ")"
} >"${src}/go.mod"
cp "${here}/etcd_main.go.in" "${src}/etcd/main.go"
log "pinned $(staging_modules "${kmod}" | wc -l) staging modules to ${STAGING_VERSION}"

log "resolving dependencies (go mod tidy)"
(cd "${src}" && go mod tidy)

# The apiserver reports its version from these variables, as release builds
# do; clients that check for a minimum Kubernetes version rely on it.
kube_ldflags="-s -w"
minor="${KUBE_VERSION#v1.}"
minor="${minor%%.*}"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
	kube_ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
	kube_ldflags+=" -X ${pkg}.gitTreeState=clean"
	kube_ldflags+=" -X ${pkg}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done

rm -f "${stamp}"
for target in etcd kube-apiserver; do
	case "${target}" in
	etcd) pkg="./etcd" ldflags="-s -w" ;;
	kube-apiserver) pkg="k8s.io/kubernetes/cmd/kube-apiserver" ldflags="${kube_ldflags}" ;;
	esac
	log "building ${target} (${pkg}); a cold kube-apiserver build takes several minutes"
	start=$(date +%s)
	(cd "${src}" && go build -trimpath -ldflags="${ldflags}" -o "${bin}/${target}.tmp" "${pkg}")
	mv "${bin}/${target}.tmp" "${bin}/${target}"
	log "built ${bin}/${target} in $(($(date +%s) - start))s"
done

printf '%s\n' "${want}" >"${stamp}"
log "done: $("${bin}/kube-apiserver" --version), etcd ${ETCD_VERSION}"
