// csi-expandable: the local cluster's second StorageClass, one whose volumes can grow online.
//
// local-path (the default class) cannot expand a volume, and the CSI drivers that can
// (csi-driver-host-path, for one) are modules the Go proxy here does not serve. This is the
// smallest CSI driver that lets the upstream external-provisioner and external-resizer and the
// upstream kubelet do what they do on a user's cluster: a volume is a directory under
// --volumes (one machine: every node reaches it, like a network volume), published into a
// pod by a bind mount, and grown by recording its new size (a directory has no size to
// change; what is tested is Kubernetes' online expansion path: controller expansion, then the
// kubelet's NodeExpandVolume on the mounted volume, with the pod running).
//
// One process serves the controller endpoint (for the sidecars) and one node endpoint per
// kubelet, each registered with that kubelet through its plugins_registry directory, as
// node-driver-registrar does.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const version = "0.1.0"

type nodeFlags []string

func (n *nodeFlags) String() string     { return strings.Join(*n, ",") }
func (n *nodeFlags) Set(v string) error { *n = append(*n, v); return nil }

func main() {
	var nodes nodeFlags
	name := flag.String("name", "expandable.csi.valkey-operator.local", "the driver's name")
	volumes := flag.String("volumes", "", "directory holding one directory per volume")
	controller := flag.String("controller-socket", "", "socket of the controller service")
	flag.Var(&nodes, "node", "NAME=KUBELET_ROOT_DIR: serve that kubelet (repeatable)")
	flag.Parse()
	if *volumes == "" || *controller == "" || len(nodes) == 0 {
		log.Fatal("usage: csi-expandable --volumes DIR --controller-socket PATH --node NAME=KUBELET_ROOT ...")
	}
	if err := os.MkdirAll(*volumes, 0o755); err != nil {
		log.Fatal(err)
	}
	store := &volumeStore{dir: *volumes}
	identity := &identityServer{name: *name}
	serve(*controller, func(s *grpc.Server) {
		csi.RegisterIdentityServer(s, identity)
		csi.RegisterControllerServer(s, &controllerServer{store: store})
	})
	for _, n := range nodes {
		nodeName, root, ok := strings.Cut(n, "=")
		if !ok {
			log.Fatalf("--node %q: want NAME=KUBELET_ROOT_DIR", n)
		}
		// Short file names: a unix socket's path is at most 107 bytes, and the kubelet's
		// directory is under the checkout (a clone in a mktemp directory already took
		// <checkout>/.localcluster/real/node-a/kubelet/plugins_registry/<driver>-reg.sock
		// past it: "bind: invalid argument").
		endpoint := filepath.Join(root, "plugins", "vkx", "csi.sock")
		serve(endpoint, func(s *grpc.Server) {
			csi.RegisterIdentityServer(s, identity)
			csi.RegisterNodeServer(s, &nodeServer{node: nodeName, store: store})
		})
		reg := filepath.Join(root, "plugins_registry", "vkx-reg.sock")
		serve(reg, func(s *grpc.Server) {
			registration.RegisterRegistrationServer(s, &registrar{name: *name, endpoint: endpoint, node: nodeName})
		})
	}
	select {}
}

// serve listens on a unix socket (replacing one left by an earlier run) in the background.
func serve(path string, register func(*grpc.Server)) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		log.Fatal(err)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	register(s)
	log.Printf("serving %s", path)
	go func() { log.Fatal(s.Serve(l)) }()
}

func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if !strings.HasSuffix(info.FullMethod, "Probe") && !strings.HasSuffix(info.FullMethod, "Capabilities") {
		log.Printf("%s %v -> err=%v", info.FullMethod, req, err)
	}
	return resp, err
}

// ---------------------------------------------------------------- volumes

// volumeStore: volume <id> is directory <dir>/<id>; its size is kept in <dir>/<id>.size.
type volumeStore struct {
	dir string
	mu  sync.Mutex
}

func (v *volumeStore) path(id string) (string, error) {
	if id == "" || strings.ContainsAny(id, "/\\") || id == "." || id == ".." {
		return "", status.Errorf(codes.InvalidArgument, "bad volume id %q", id)
	}
	return filepath.Join(v.dir, id), nil
}

func (v *volumeStore) size(id string) (int64, error) {
	p, err := v.path(id)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p + ".size")
	if errors.Is(err, os.ErrNotExist) {
		return 0, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	} else if err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func (v *volumeStore) setSize(id string, bytes int64) error {
	p, err := v.path(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return os.WriteFile(p+".size", []byte(strconv.FormatInt(bytes, 10)), 0o644)
}

// ---------------------------------------------------------------- identity

type identityServer struct {
	csi.UnimplementedIdentityServer
	name string
}

func (i *identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: version}, nil
}

func (i *identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}}, nil
}

func (i *identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// ---------------------------------------------------------------- controller

type controllerServer struct {
	csi.UnimplementedControllerServer
	store *volumeStore
}

func (c *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	}
	out := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range caps {
		out.Capabilities = append(out.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return out, nil
}

func (c *controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources are not supported")
	}
	bytes := req.GetCapacityRange().GetRequiredBytes()
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	// Idempotent: a retried CreateVolume of an existing volume answers with it.
	if have, err := c.store.size(req.GetName()); err == nil {
		if have < bytes {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", req.GetName(), have)
		}
		bytes = have
	} else if err := c.store.setSize(req.GetName(), bytes); err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), CapacityBytes: bytes}}, nil
}

func (c *controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	p, err := c.store.path(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	if err := os.RemoveAll(p); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	_ = os.Remove(p + ".size")
	return &csi.DeleteVolumeResponse{}, nil
}

func (c *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if _, err := c.store.size(req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities()}}, nil
}

// ControllerExpandVolume records the new size; the node side then runs (the kubelet's online
// expansion of a mounted volume), as a block-backed driver's file-system resize would.
func (c *controllerServer) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	bytes := req.GetCapacityRange().GetRequiredBytes()
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	have, err := c.store.size(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if bytes > have {
		if err := c.store.setSize(req.GetVolumeId(), bytes); err != nil {
			return nil, err
		}
		have = bytes
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: have, NodeExpansionRequired: true}, nil
}

// ---------------------------------------------------------------- node

type nodeServer struct {
	csi.UnimplementedNodeServer
	node  string
	store *volumeStore
}

func (n *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.node}, nil
}

func (n *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
			Type: csi.NodeServiceCapability_RPC_EXPAND_VOLUME}}},
	}}, nil
}

// NodePublishVolume bind-mounts the volume's directory at the pod's target path (this process
// runs in the host's mount namespace, as the kubelet and containerd do).
func (n *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	src, err := n.store.path(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := n.store.size(req.GetVolumeId()); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "no target path")
	}
	if mounted(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount %s at %s: %v", src, target, err)
	}
	if req.GetReadonly() {
		flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
		if err := syscall.Mount("", target, "", flags, ""); err != nil {
			_ = syscall.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "read-only remount of %s: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	for mounted(target) {
		if err := syscall.Unmount(target, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeExpandVolume: the volume is mounted and its pod running; the new size is what the
// controller recorded (a directory needs no file-system resize).
func (n *nodeServer) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	have, err := n.store.size(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if want := req.GetCapacityRange().GetRequiredBytes(); want > have {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s has %d bytes, %d asked: expand it on the controller first", req.GetVolumeId(), have, want)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: have}, nil
}

// mounted: whether path is a mount point (in /proc/self/mountinfo).
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	clean := filepath.Clean(path)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == clean {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- kubelet registration

type registrar struct {
	registration.UnimplementedRegistrationServer
	name, endpoint, node string
}

func (r *registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{Type: registration.CSIPlugin, Name: r.name, Endpoint: r.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("registered with the kubelet of %s", r.node)
	} else {
		log.Printf("the kubelet of %s refused the registration: %s", r.node, s.Error)
	}
	return &registration.RegistrationStatusResponse{}, nil
}
