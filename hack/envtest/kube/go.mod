// Wrapper module that builds kube-apiserver for the apiserver test tier.
// k8s.io/kubernetes requires its staging modules at the placeholder v0.0.0, so every
// k8s.io/* staging module is replaced with its published v0.<minor>.<patch>.
// hack/envtest/build.sh regenerates the replace block from k8s.io/kubernetes's own go.mod.
module gpu-node-guard.invalid/envtest/kube

go 1.24.0

godebug default=go1.24

tool k8s.io/kubernetes/cmd/kube-apiserver

require k8s.io/kubernetes v1.34.4
