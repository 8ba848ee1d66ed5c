// pause: the sandbox ("infra") container of every Pod on the node tier. It holds the Pod's
// namespaces, reaps zombies when it is PID 1 of a shared PID namespace, and exits on SIGINT or
// SIGTERM, as registry.k8s.io/pause does (that one is C): a static Go binary built offline, so
// the node never pulls an image. tests/node also runs it as PID 1 of the node's own namespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("pause (gpu-node-guard node tier) 3.10-go\n")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
