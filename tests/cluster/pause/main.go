// Command pause is the sandbox ("pause") container of the test node's pods: it holds the pod's
// namespaces open, reaps orphaned children (it is PID 1 of the pod) and exits on SIGTERM/SIGINT.
// The test harness builds it static and imports it into containerd under the sandbox_image name,
// because no image registry is reachable from the test machine.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
