// Command nodetopo-test-deviceplugin is a device plugin for the test node only: it registers with the
// real kubelet over the device-plugin API (v1beta1) and advertises, as one extended resource (default
// nvidia.com/gpu), the device IDs it is given (a fixture bundle's GPU UUIDs). There is no hardware
// behind them: Allocate hands the container NVIDIA_VISIBLE_DEVICES=<the IDs the kubelet chose> and,
// with --dev-nvidia-host-path, a device node /dev/nvidia<N> per device (N: its position in the
// device list, the GPU's index) backed by that host device (e.g. /dev/null), as the NVIDIA container
// runtime would create /dev/nvidiaN.
//
// GetPreferredAllocation packs a request into one NVLink island (the islands are given as groups of
// IDs); --allocate-across-islands turns that around and spreads it over different islands, so that a
// start-up probe has a misplaced pod to catch.
//
// --misreport-devices is a broken plugin or runtime: the container is told (and given device nodes
// for) the next device in the list after each device the kubelet chose, so what the container sees
// is not what the kubelet recorded.
//
// It re-serves its socket and registers again when the kubelet restarts (kubelet.sock recreated, or
// the kubelet removed this plugin's socket).
//
// Usage:
//
//	nodetopo-test-deviceplugin --config devices.json [--resource nvidia.com/gpu]
//	    [--plugin-dir /var/lib/kubelet/device-plugins] [--socket nodetopo-test.sock]
//	    [--allocate-across-islands] [--dev-nvidia-host-path /dev/null] [--misreport-devices]
//
// devices.json: {"devices": ["GPU-...", ...], "islands": [["GPU-...", "GPU-..."], ...]}
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Config is what the plugin advertises: device IDs in order, and the islands as groups of those IDs.
type Config struct {
	Devices []string   `json:"devices"`
	Islands [][]string `json:"islands"`
}

func loadConfig(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if len(c.Devices) == 0 {
		return c, fmt.Errorf("%s: no devices", path)
	}
	known := map[string]bool{}
	for _, d := range c.Devices {
		if d == "" || known[d] {
			return c, fmt.Errorf("%s: empty or repeated device ID %q", path, d)
		}
		known[d] = true
	}
	seen := map[string]bool{}
	for i, island := range c.Islands {
		for _, d := range island {
			if !known[d] {
				return c, fmt.Errorf("%s: island %d names %q, which is not a device", path, i, d)
			}
			if seen[d] {
				return c, fmt.Errorf("%s: device %q is in two islands", path, d)
			}
			seen[d] = true
		}
	}
	return c, nil
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	config    Config
	across    bool
	devNode   string
	misreport bool
	stop      chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devices := make([]*pluginapi.Device, 0, len(p.config.Devices))
	for _, id := range p.config.Devices {
		devices = append(devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	log.Printf("ListAndWatch: advertising %d devices: %s", len(devices), strings.Join(p.config.Devices, ","))
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		log.Printf("ListAndWatch: send: %v", err)
		return err
	}
	select {
	case <-stream.Context().Done():
		log.Printf("ListAndWatch: the kubelet closed the stream")
	case <-p.stop:
	}
	return nil
}

func (p *plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, r := range req.ContainerRequests {
		chosen := prefer(p.config, r.AvailableDeviceIDs, r.MustIncludeDeviceIDs, int(r.AllocationSize), p.across)
		mode := "one island"
		if p.across {
			mode = "across islands"
		}
		log.Printf("GetPreferredAllocation (%s): size %d of available [%s], must include [%s] -> [%s]", mode,
			r.AllocationSize, strings.Join(r.AvailableDeviceIDs, ","), strings.Join(r.MustIncludeDeviceIDs, ","),
			strings.Join(chosen, ","))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return resp, nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, r := range req.ContainerRequests {
		ids := ordered(p.config, r.DevicesIds)
		for _, id := range ids {
			if indexOf(p.config.Devices, id) < 0 {
				log.Printf("Allocate: unknown device %q", id)
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		told := ids
		if p.misreport {
			told = nil
			for _, id := range ids {
				told = append(told, p.config.Devices[(indexOf(p.config.Devices, id)+1)%len(p.config.Devices)])
			}
			log.Printf("Allocate (misreporting): the kubelet chose %s, the container is told %s",
				strings.Join(ids, ","), strings.Join(told, ","))
		}
		var nodes []*pluginapi.DeviceSpec
		var paths []string
		if p.devNode != "" {
			for _, id := range told {
				path := fmt.Sprintf("/dev/nvidia%d", indexOf(p.config.Devices, id))
				nodes = append(nodes, &pluginapi.DeviceSpec{ContainerPath: path, HostPath: p.devNode, Permissions: "rw"})
				paths = append(paths, path)
			}
		}
		log.Printf("Allocate: NVIDIA_VISIBLE_DEVICES=%s, device nodes [%s]", strings.Join(told, ","), strings.Join(paths, ","))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:    map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(told, ",")},
			Devices: nodes,
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func indexOf(list []string, id string) int {
	for i, d := range list {
		if d == id {
			return i
		}
	}
	return -1
}

// ordered returns ids in the advertised order (unknown IDs last, as given).
func ordered(c Config, ids []string) []string {
	var out, unknown []string
	for _, d := range c.Devices {
		if indexOf(ids, d) >= 0 {
			out = append(out, d)
		}
	}
	for _, d := range ids {
		if indexOf(c.Devices, d) < 0 {
			unknown = append(unknown, d)
		}
	}
	return append(out, unknown...)
}

// groups returns the islands, in the given order, followed by one group per device in no island.
func groups(c Config) [][]string {
	out := append([][]string{}, c.Islands...)
	inIsland := map[string]bool{}
	for _, island := range c.Islands {
		for _, d := range island {
			inIsland[d] = true
		}
	}
	for _, d := range c.Devices {
		if !inIsland[d] {
			out = append(out, []string{d})
		}
	}
	return out
}

// prefer picks size devices from available, must-include ones first. Packed (across=false): fill the
// island already holding a must-include device, then the island with the fewest free devices that
// still holds the rest (best fit), else the largest free groups first. Across: one device from each
// island in turn, the island with the most free devices first, so no two come from one island while
// another island still has a free device.
func prefer(c Config, available, must []string, size int, across bool) []string {
	chosen := append([]string{}, must...)
	taken := map[string]bool{}
	for _, d := range must {
		taken[d] = true
	}
	free := func(group []string) []string {
		var out []string
		for _, d := range group {
			if !taken[d] && indexOf(available, d) >= 0 {
				out = append(out, d)
			}
		}
		return out
	}
	take := func(d string) { chosen = append(chosen, d); taken[d] = true }
	all := groups(c)
	if across {
		used := map[int]bool{}
		for len(chosen) < size {
			best, bestFree := -1, 0
			for i, g := range all {
				n := len(free(g))
				if n == 0 {
					continue
				}
				// islands not used yet first, then the most free devices, then the first island
				if best < 0 || (!used[i] && used[best]) || (used[i] == used[best] && n > bestFree) {
					best, bestFree = i, n
				}
			}
			if best < 0 {
				break
			}
			take(free(all[best])[0])
			used[best] = true
		}
		return chosen
	}
	for _, g := range all { // the island of a must-include device first
		holdsMust := false
		for _, d := range must {
			holdsMust = holdsMust || indexOf(g, d) >= 0
		}
		if holdsMust {
			for _, d := range free(g) {
				if len(chosen) < size {
					take(d)
				}
			}
		}
	}
	for len(chosen) < size {
		need := size - len(chosen)
		best, bestFree := -1, 0
		for i, g := range all { // best fit: the smallest group that holds the rest
			if n := len(free(g)); n >= need && (best < 0 || n < bestFree) {
				best, bestFree = i, n
			}
		}
		if best < 0 { // none holds the rest: the largest group first
			for i, g := range all {
				if n := len(free(g)); n > bestFree {
					best, bestFree = i, n
				}
			}
		}
		if best < 0 {
			break
		}
		for _, d := range free(all[best]) {
			if len(chosen) < size {
				take(d)
			}
		}
	}
	return chosen
}

// serve starts the gRPC server on socket (replacing a stale file) and registers with the kubelet.
func serve(p *plugin, dir, socketName, resource string) (*grpc.Server, error) {
	socket := filepath.Join(dir, socketName)
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() {
		if err := server.Serve(listener); err != nil {
			log.Printf("serve %s: %v", socket, err)
		}
	}()
	kubelet := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		server.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socketName,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	}, grpc.WaitForReady(true))
	if err != nil {
		server.Stop()
		return nil, fmt.Errorf("register with %s: %w", kubelet, err)
	}
	log.Printf("registered %s with %s, serving %s", resource, kubelet, socket)
	return server, nil
}

func inode(path string) uint64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

func main() {
	configPath := flag.String("config", "", "JSON file: {\"devices\": [IDs], \"islands\": [[IDs], ...]}")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name to advertise")
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	socketName := flag.String("socket", "nodetopo-test.sock", "this plugin's socket name in --plugin-dir")
	across := flag.Bool("allocate-across-islands", false, "prefer devices from different islands (test switch)")
	misreport := flag.Bool("misreport-devices", false, "tell the container the next device after each one chosen (test switch)")
	devNode := flag.String("dev-nvidia-host-path", "", "give each container /dev/nvidia<index> backed by this host device")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if *configPath == "" {
		log.Fatal("--config is required")
	}
	config, err := loadConfig(*configPath)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s: %d devices, %d islands, allocate across islands: %v", *resource, len(config.Devices),
		len(config.Islands), *across)
	kubelet := filepath.Join(*dir, filepath.Base(pluginapi.KubeletSocket))
	socket := filepath.Join(*dir, *socketName)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	var mu sync.Mutex
	var server *grpc.Server
	var p *plugin
	var registeredAt uint64
	stop := func() {
		mu.Lock()
		defer mu.Unlock()
		if server != nil {
			close(p.stop)
			server.Stop()
			server = nil
		}
	}
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		// (Re)start when not serving, when the kubelet socket was recreated, or our socket was removed.
		current := inode(kubelet)
		if current != 0 && (server == nil || current != registeredAt || inode(socket) == 0) {
			if server != nil {
				log.Printf("the kubelet restarted (or removed %s): serving and registering again", socket)
				stop()
			}
			p = &plugin{config: config, across: *across, devNode: *devNode, misreport: *misreport, stop: make(chan struct{})}
			s, err := serve(p, *dir, *socketName, *resource)
			if err != nil {
				log.Printf("%v (retrying)", err)
			} else {
				mu.Lock()
				server, registeredAt = s, current
				mu.Unlock()
			}
		}
		select {
		case sig := <-signals:
			log.Printf("%v: stopping", sig)
			stop()
			_ = os.Remove(socket)
			return
		case <-ticker.C:
		}
	}
}
