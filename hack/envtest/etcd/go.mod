// Wrapper module that builds etcd for the apiserver test tier. go.etcd.io/etcd/server/v3 is a
// main package, but its go.mod has local replace directives, so `go install` refuses it;
// as a plain dependency those replaces are ignored.
module gpu-node-guard.invalid/envtest/etcd

go 1.26.0

tool go.etcd.io/etcd/server/v3

require go.etcd.io/etcd/server/v3 v3.6.16
