// Command pause is the dev node's Pod sandbox process (what registry images call "pause"): it holds the Pod's
// namespaces, reaps orphaned children (it is PID 1 when the Pod shares its PID namespace) and exits on
// SIGINT/SIGTERM. Built locally by hack/build-tools.sh because the node can pull nothing.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		os.Stderr.WriteString("warning: pause should be the first process\n")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
