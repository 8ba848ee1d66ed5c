// Wrapper module that builds Thanos for the engines test tier. github.com/thanos-io/thanos has
// replace directives in its go.mod, so `go install …/cmd/thanos@v0.42.4` refuses it; as a
// dependency of this module it builds, once hack/engines/build.sh has copied those replaces here
// (a dependency's replaces are ignored, and Thanos does not build without them).
module gpu-node-guard.invalid/engines/thanos

go 1.26.0

tool github.com/thanos-io/thanos/cmd/thanos
