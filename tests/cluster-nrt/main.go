// Command kube-scheduler-nrt is the real kube-scheduler with one out-of-tree plugin registered: the
// scheduler-plugins NodeResourceTopologyMatch (the version go.mod pins), which reads the SIG's
// NodeResourceTopology objects. The nodetopo test suite starts it against its test apiserver to check
// the NodeResourceTopology objects nodetopo publishes. Nothing here is nodetopo code.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/scheduler-plugins/pkg/noderesourcetopology"

	// The plugin's arguments (NodeResourceTopologyMatchArgs) decode from the scheduler configuration
	// through this scheme.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(noderesourcetopology.Name, noderesourcetopology.New))
	os.Exit(cli.Run(command))
}
