// Command nodetopo-test-dradriver is a DRA driver for the test node only, written on
// k8s.io/dynamic-resource-allocation/kubeletplugin: it registers with the real kubelet (plugin
// registration socket in --registrar-dir, DRA gRPC socket in --plugin-dir), publishes one
// ResourceSlice (one pool named after the node) with the devices of its --config, and prepares
// claims by writing one CDI spec per claim into --cdi-dir and handing the kubelet the CDI device IDs,
// as the real drivers do. There is no hardware behind the devices.
//
// The config gives each device as a resource.k8s.io/v1 Device (name, attributes, capacity: whatever
// the real driver this one stands in for publishes), plus what the container gets for it: device
// nodes (container path, backed by a host path such as /dev/null) and environment variables. A
// variable given by several devices of one request is joined with commas in the order of the
// claim's allocation results (NVIDIA_VISIBLE_DEVICES=<uuid>,<uuid>).
//
// The scheduler's allocator takes the first devices of a pool that satisfy a claim, in the order of
// the slice; so the order of the published devices is the only choice a driver has. --order:
//
//	as-given        the config's order (a fixture's index order: the groups contiguous)
//	across-groups   round robin over the config's groups (NVLink islands), the largest group first,
//	                so that a claim the scheduler may satisfy with any devices gets them from
//	                different groups (the test switch, like the test device plugin's
//	                --allocate-across-islands)
//	reversed        the config's order reversed
//
// --misreport-devices is a broken driver or runtime: each allocated device's container edits are
// those of the next device in the config, so what the container sees is not what the claim says.
//
// Usage:
//
//	nodetopo-test-dradriver --config devices.json --kubeconfig FILE --node-name NODE
//	    --registrar-dir <kubelet root>/plugins_registry --plugin-dir DIR --cdi-dir DIR
//	    [--order as-given|across-groups|reversed] [--misreport-devices]
//
// devices.json:
//
//	{"driver": "gpu.nvidia.com",
//	 "devices": [{"device": {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-..."}}},
//	              "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}],
//	              "env": {"NVIDIA_VISIBLE_DEVICES": "GPU-..."}}, ...],
//	 "groups": [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"]]}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// DeviceNode is a device node the container gets: Path in the container, backed by HostPath.
type DeviceNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath"`
}

// DeviceConfig is one published device and what a container allocated it gets.
type DeviceConfig struct {
	Device      resourceapi.Device `json:"device"`
	DeviceNodes []DeviceNode       `json:"deviceNodes,omitempty"`
	Env         map[string]string  `json:"env,omitempty"`
}

// Config is the driver's inventory.
type Config struct {
	Driver  string         `json:"driver"`
	Devices []DeviceConfig `json:"devices"`
	Groups  [][]string     `json:"groups,omitempty"`
}

func loadConfig(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	decoder := json.NewDecoder(strings.NewReader(string(data)))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if c.Driver == "" {
		return c, fmt.Errorf("%s: no driver name", path)
	}
	known := map[string]bool{}
	for _, d := range c.Devices {
		if d.Device.Name == "" || known[d.Device.Name] {
			return c, fmt.Errorf("%s: empty or repeated device name %q", path, d.Device.Name)
		}
		known[d.Device.Name] = true
	}
	seen := map[string]bool{}
	for i, group := range c.Groups {
		for _, name := range group {
			if !known[name] {
				return c, fmt.Errorf("%s: group %d names %q, which is not a device", path, i, name)
			}
			if seen[name] {
				return c, fmt.Errorf("%s: device %q is in two groups", path, name)
			}
			seen[name] = true
		}
	}
	return c, nil
}

// order returns the config's devices in the published order (see the package doc).
func order(c Config, mode string) ([]DeviceConfig, error) {
	byName := map[string]DeviceConfig{}
	for _, d := range c.Devices {
		byName[d.Device.Name] = d
	}
	switch mode {
	case "as-given":
		return append([]DeviceConfig{}, c.Devices...), nil
	case "reversed":
		out := make([]DeviceConfig, 0, len(c.Devices))
		for i := len(c.Devices) - 1; i >= 0; i-- {
			out = append(out, c.Devices[i])
		}
		return out, nil
	case "across-groups":
		// The groups, then one group per device in none, the largest first (stable).
		groups := append([][]string{}, c.Groups...)
		grouped := map[string]bool{}
		for _, g := range c.Groups {
			for _, name := range g {
				grouped[name] = true
			}
		}
		for _, d := range c.Devices {
			if !grouped[d.Device.Name] {
				groups = append(groups, []string{d.Device.Name})
			}
		}
		sort.SliceStable(groups, func(i, j int) bool { return len(groups[i]) > len(groups[j]) })
		var out []DeviceConfig
		for round := 0; len(out) < len(c.Devices); round++ {
			for _, g := range groups {
				if round < len(g) {
					out = append(out, byName[g[round]])
				}
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown --order %q (as-given, across-groups, reversed)", mode)
}

// cdiDevice and cdiSpec are the parts of a CDI spec (cdiVersion 0.5.0) this driver writes.
type cdiDeviceNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath,omitempty"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type driver struct {
	config    Config
	byName    map[string]int // config index of each device
	cdiDir    string
	misreport bool
	cancel    context.CancelCauseFunc
	mu        sync.Mutex
}

func (d *driver) vendor() string { return "k8s." + d.config.Driver }
func (d *driver) kind() string   { return d.vendor() + "/claim" }

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("%s-claim_%s.json", d.vendor(), uid))
}

// told is the config entry whose edits the container gets for the allocated device name.
func (d *driver) told(name string) (DeviceConfig, error) {
	i, ok := d.byName[name]
	if !ok {
		return DeviceConfig{}, fmt.Errorf("device %q is not one of this driver's", name)
	}
	if d.misreport {
		i = (i + 1) % len(d.config.Devices)
	}
	return d.config.Devices[i], nil
}

func safe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' {
			return '_'
		}
		return r
	}, s)
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	spec := cdiSpec{Version: "0.5.0", Kind: d.kind()}
	var result kubeletplugin.PrepareResult
	type joined struct {
		name  string
		value []string
	}
	envByRequest := map[string][]*joined{} // request -> variables in first-seen order
	firstOfRequest := map[string]int{}     // request -> index in result.Devices
	var requests []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.config.Driver {
			continue
		}
		told, err := d.told(r.Device)
		if err != nil {
			return kubeletplugin.PrepareResult{Err: err}
		}
		// A CDI device must edit something: one per device with device nodes.
		var ids []string
		if len(told.DeviceNodes) > 0 {
			cdiName := fmt.Sprintf("%s-%s", claim.UID, r.Device)
			var nodes []cdiDeviceNode
			for _, n := range told.DeviceNodes {
				nodes = append(nodes, cdiDeviceNode{Path: n.Path, HostPath: n.HostPath})
			}
			spec.Devices = append(spec.Devices, cdiDevice{Name: cdiName, ContainerEdits: cdiEdits{DeviceNodes: nodes}})
			ids = append(ids, d.kind()+"="+cdiName)
		}
		if _, ok := firstOfRequest[r.Request]; !ok {
			firstOfRequest[r.Request] = len(result.Devices)
			requests = append(requests, r.Request)
		}
		names := make([]string, 0, len(told.Env))
		for k := range told.Env {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			var found *joined
			for _, j := range envByRequest[r.Request] {
				if j.name == k {
					found = j
				}
			}
			if found == nil {
				found = &joined{name: k}
				envByRequest[r.Request] = append(envByRequest[r.Request], found)
			}
			found.value = append(found.value, told.Env[k])
		}
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests:     []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CDIDeviceIDs: ids,
		})
	}
	// One more CDI device per request for its joined environment, handed with the request's first device.
	for _, request := range requests {
		var env []string
		for _, j := range envByRequest[request] {
			env = append(env, j.name+"="+strings.Join(j.value, ","))
		}
		if len(env) == 0 {
			continue
		}
		name := fmt.Sprintf("%s-%s-env", claim.UID, safe(request))
		spec.Devices = append(spec.Devices, cdiDevice{Name: name, ContainerEdits: cdiEdits{Env: env}})
		first := &result.Devices[firstOfRequest[request]]
		first.CDIDeviceIDs = append(first.CDIDeviceIDs, d.kind()+"="+name)
	}
	if len(spec.Devices) == 0 {
		return result
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	path := d.specPath(claim.UID)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	if err := os.Rename(tmp, path); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	for _, dev := range result.Devices {
		klog.Infof("prepared %s/%s (%s): request %s device %s/%s -> CDI %s", claim.Namespace, claim.Name, claim.UID,
			strings.Join(dev.Requests, ","), dev.PoolName, dev.DeviceName, strings.Join(dev.CDIDeviceIDs, " "))
	}
	return result
}

// PrepareResourceClaims writes each claim's CDI spec and returns its CDI device IDs.
func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		out[claim.UID] = d.prepare(claim)
		if err := out[claim.UID].Err; err != nil {
			klog.Errorf("prepare %s/%s: %v", claim.Namespace, claim.Name, err)
		}
	}
	return out, nil
}

// UnprepareResourceClaims removes each claim's CDI spec (none is no error: idempotent).
func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[claim.UID] = err
		klog.Infof("unprepared %s", claim.String())
	}
	return out, nil
}

// HandleError logs background errors; a fatal one stops the driver.
func (d *driver) HandleError(_ context.Context, err error, msg string) {
	klog.Errorf("%s: %v", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel(fmt.Errorf("%s: %w", msg, err))
	}
}

func main() {
	klog.InitFlags(nil)
	configPath := flag.String("config", "", "JSON inventory (see the package doc)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig with rights to write ResourceSlices and read ResourceClaims")
	nodeName := flag.String("node-name", "", "the Node this driver runs on (the pool's name)")
	registrarDir := flag.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	pluginDir := flag.String("plugin-dir", "", "this driver's own directory for its DRA socket (default: /var/lib/kubelet/plugins/<driver>)")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where the container runtime reads CDI specs")
	orderMode := flag.String("order", "as-given", "published device order: as-given, across-groups (test switch), reversed")
	misreport := flag.Bool("misreport-devices", false, "give each container the next device's edits (test switch)")
	flag.Parse()
	if *configPath == "" || *nodeName == "" {
		klog.Fatal("--config and --node-name are required")
	}
	config, err := loadConfig(*configPath)
	if err != nil {
		klog.Fatal(err)
	}
	published, err := order(config, *orderMode)
	if err != nil {
		klog.Fatal(err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	if *pluginDir == "" {
		*pluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, config.Driver)
	}
	for _, dir := range []string{*registrarDir, *pluginDir, *cdiDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			klog.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	d := &driver{config: config, byName: map[string]int{}, cdiDir: *cdiDir, misreport: *misreport, cancel: cancel}
	for i, dev := range config.Devices {
		d.byName[dev.Device.Name] = i
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(config.Driver),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.RegistrarDirectoryPath(*registrarDir),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir),
		kubeletplugin.GRPCVerbosity(-1),
	)
	if err != nil {
		klog.Fatalf("start: %v", err)
	}
	devices := make([]resourceapi.Device, 0, len(published))
	names := make([]string, 0, len(published))
	for _, dev := range published {
		devices = append(devices, dev.Device)
		names = append(names, dev.Device.Name)
	}
	resources := resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{*nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}}},
	}
	if err := helper.PublishResources(ctx, resources); err != nil {
		klog.Fatalf("publish: %v", err)
	}
	klog.Infof("driver %s on node %s: publishing %d devices in pool %s, order %s: %s; misreport %v",
		config.Driver, *nodeName, len(devices), *nodeName, *orderMode, strings.Join(names, ","), *misreport)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-signals:
		klog.Infof("%v: stopping", sig)
	case <-ctx.Done():
		klog.Errorf("stopping: %v", context.Cause(ctx))
	}
	helper.Stop()
	klog.Flush()
	if context.Cause(ctx) != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
		os.Exit(1)
	}
}
