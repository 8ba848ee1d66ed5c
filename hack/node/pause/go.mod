module gpu-node-guard.invalid/pause

go 1.24
