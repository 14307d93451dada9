package vc

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
	"gopkg.in/yaml.v3"

	"gpusim/internal/fault"
)

// Guest identity at a clone's first boot: vSphere guest customization (a CloneSpec's customization, Linux prep)
// and cloud-init's VMware datasource (guestinfo.metadata in extraConfig). gpusim runs both at power-on the way
// the guest would: the hostname and addresses come back through guest info, and customization posts vCenter's
// events (CustomizationStartedEvent, then CustomizationSucceeded or a CustomizationFailed subtype). A failure
// is armed per VM name through the control endpoint.

type customFault struct {
	Event  string `json:"event"`  // CustomizationLinuxIdentityFailed (default) | CustomizationNetworkSetupFailed | CustomizationUnknownFailure
	Reason string `json:"reason"` // the event's reason
}

type guestBook struct {
	mu      sync.Mutex
	pending map[string]*types.CustomizationSpec // VM moid -> customization for its first boot
	faults  map[string]customFault              // VM name -> the next customization fails
}

func (b *guestBook) put(vm string, spec *types.CustomizationSpec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = map[string]*types.CustomizationSpec{}
	}
	b.pending[vm] = spec
}

func (b *guestBook) take(vm, name string) (*types.CustomizationSpec, *customFault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	spec, ok := b.pending[vm]
	if !ok {
		return nil, nil
	}
	delete(b.pending, vm)
	if f, armed := b.faults[name]; armed {
		delete(b.faults, name)
		return spec, &f
	}
	return spec, nil
}

func (b *guestBook) arm(name string, f customFault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.faults == nil {
		b.faults = map[string]customFault{}
	}
	b.faults[name] = f
}

// ethernetCards are a VM's network adapters in key order (the order of guest.net).
func ethernetCards(vm *simulator.VirtualMachine) []*types.VirtualEthernetCard {
	var out []*types.VirtualEthernetCard
	for _, d := range vm.Config.Hardware.Device {
		if c, ok := d.(types.BaseVirtualEthernetCard); ok {
			out = append(out, c.GetVirtualEthernetCard())
		}
	}
	return out
}

// pendCustomization keeps a clone's customization for its first power-on; as vSphere does, the spec must map
// every network adapter (NicSettingMismatch otherwise).
func (s *Sim) pendCustomization(clone *simulator.VirtualMachine, spec *types.CustomizationSpec) types.BaseMethodFault {
	if spec == nil {
		return nil
	}
	if _, cloudInit := spec.Identity.(*types.CustomizationCloudinitPrep); !cloudInit || len(spec.NicSettingMap) > 0 {
		if n := len(ethernetCards(clone)); n != len(spec.NicSettingMap) {
			return s.messages.With(fault.NicSettingMismatch(len(spec.NicSettingMap), n),
				fmt.Sprintf("The number of network adapter settings in the customization specification: %d does not match the number of network adapters present in the virtual machine: %d.", len(spec.NicSettingMap), n))
		}
	}
	s.guests.put(clone.Self.Value, spec)
	return nil
}

// firstBoot runs a powered-on VM's pending customization, or its cloud-init guestinfo metadata.
func (s *Sim) firstBoot(ctx *simulator.Context, vm *simulator.VirtualMachine) {
	spec, fault := s.guests.take(vm.Self.Value, vm.Name)
	if spec != nil {
		s.customize(ctx, vm, spec, fault)
		return
	}
	s.cloudInit(ctx, vm)
}

func vmEvent(vm *simulator.VirtualMachine) types.CustomizationEvent {
	return types.CustomizationEvent{VmEvent: types.VmEvent{Event: types.Event{
		Vm: &types.VmEventArgument{EntityEventArgument: types.EntityEventArgument{Name: vm.Name}, Vm: vm.Self},
	}}, LogLocation: "/var/log/vmware-imc/toolsDeployPkg.log"}
}

func (s *Sim) post(ctx *simulator.Context, events ...types.BaseEvent) {
	em := ctx.Map.EventManager()
	ctx.WithLock(em, func() {
		for _, e := range events {
			em.PostEvent(ctx, &types.PostEvent{EventToPost: e})
		}
	})
}

func (s *Sim) customize(ctx *simulator.Context, vm *simulator.VirtualMachine, spec *types.CustomizationSpec, fault *customFault) {
	event := vmEvent(vm)
	s.post(ctx, &types.CustomizationStartedEvent{CustomizationEvent: event})
	now := time.Now()
	if fault != nil {
		failed := types.CustomizationFailed{CustomizationEvent: event, Reason: fault.Reason}
		var ev types.BaseEvent
		switch fault.Event {
		case "CustomizationNetworkSetupFailed":
			ev = &types.CustomizationNetworkSetupFailed{CustomizationFailed: failed}
		case "CustomizationUnknownFailure":
			ev = &types.CustomizationUnknownFailure{CustomizationFailed: failed}
		default:
			ev = &types.CustomizationLinuxIdentityFailed{CustomizationFailed: failed}
		}
		s.post(ctx, ev)
		info := &types.GuestInfoCustomizationInfo{CustomizationStatus: string(types.GuestInfoCustomizationStatusTOOLSDEPLOYPKG_FAILED),
			StartTime: &now, EndTime: &now, ErrorMsg: fault.Reason}
		ctx.WithLock(vm, func() { ctx.Map.Update(ctx, vm, []types.PropertyChange{{Name: "guest.customizationInfo", Val: info}}) })
		return
	}
	hostname := ""
	if prep, ok := spec.Identity.(*types.CustomizationLinuxPrep); ok {
		if fixed, ok := prep.HostName.(*types.CustomizationFixedName); ok {
			hostname = fixed.Name
		} else {
			hostname = vm.Name
		}
	}
	var ips []string
	for _, m := range spec.NicSettingMap {
		ip := ""
		if fixed, ok := m.Adapter.Ip.(*types.CustomizationFixedIp); ok {
			ip = fixed.IpAddress
		}
		ips = append(ips, ip)
	}
	s.setGuestIdentity(ctx, vm, hostname, ips)
	info := &types.GuestInfoCustomizationInfo{CustomizationStatus: string(types.GuestInfoCustomizationStatusTOOLSDEPLOYPKG_SUCCEEDED),
		StartTime: &now, EndTime: &now}
	ctx.WithLock(vm, func() { ctx.Map.Update(ctx, vm, []types.PropertyChange{{Name: "guest.customizationInfo", Val: info}}) })
	s.post(ctx, &types.CustomizationSucceeded{CustomizationEvent: event})
}

// setGuestIdentity reports the guest's hostname and one address per adapter (in guest.net order; "" keeps
// what the adapter has) through guest info, with VMware Tools running.
func (s *Sim) setGuestIdentity(ctx *simulator.Context, vm *simulator.VirtualMachine, hostname string, ips []string) {
	ctx.WithLock(vm, func() {
		guest := types.GuestInfo{}
		if vm.Guest != nil {
			guest = *vm.Guest
		}
		guest.Net = append([]types.GuestNicInfo(nil), guest.Net...)
		primary := ""
		for i := range guest.Net {
			if i < len(ips) && ips[i] != "" {
				guest.Net[i].IpAddress = []string{ips[i]}
				if primary == "" {
					primary = ips[i]
				}
			}
		}
		if hostname != "" {
			guest.HostName = hostname
		}
		if primary != "" {
			guest.IpAddress = primary
		}
		guest.GuestState = "running"
		guest.ToolsRunningStatus = string(types.VirtualMachineToolsRunningStatusGuestToolsRunning)
		ctx.Map.Update(ctx, vm, []types.PropertyChange{{Name: "guest", Val: &guest}})
	})
}

// cloudInitMeta is what gpusim reads of cloud-init meta-data: the hostname and, per ethernet, its MAC match
// and static addresses (network config version 2).
type cloudInitMeta struct {
	LocalHostname string `yaml:"local-hostname"`
	Network       struct {
		Ethernets map[string]struct {
			Match struct {
				MacAddress string `yaml:"macaddress"`
			} `yaml:"match"`
			Addresses []string `yaml:"addresses"`
		} `yaml:"ethernets"`
	} `yaml:"network"`
}

// cloudInit applies guestinfo.metadata as cloud-init's VMware datasource would (base64 and gzip+base64
// encodings); metadata it cannot read changes nothing, as a guest whose cloud-init fails reports nothing.
func (s *Sim) cloudInit(ctx *simulator.Context, vm *simulator.VirtualMachine) {
	values := map[string]string{}
	for _, o := range vm.Config.ExtraConfig {
		v := o.GetOptionValue()
		if str, ok := v.Value.(string); ok && strings.HasPrefix(v.Key, "guestinfo.metadata") {
			values[v.Key] = str
		}
	}
	raw, ok := values["guestinfo.metadata"]
	if !ok {
		return
	}
	text, err := decodeGuestinfo(raw, values["guestinfo.metadata.encoding"])
	var meta cloudInitMeta
	if err != nil || yaml.Unmarshal(text, &meta) != nil {
		return
	}
	macs := map[string]string{}
	for _, eth := range meta.Network.Ethernets {
		if len(eth.Addresses) > 0 {
			macs[strings.ToLower(eth.Match.MacAddress)] = strings.SplitN(eth.Addresses[0], "/", 2)[0]
		}
	}
	var ips []string
	for _, card := range ethernetCards(vm) {
		ips = append(ips, macs[strings.ToLower(card.MacAddress)])
	}
	s.setGuestIdentity(ctx, vm, meta.LocalHostname, ips)
}

func decodeGuestinfo(value, encoding string) ([]byte, error) {
	switch encoding {
	case "", "none":
		return []byte(value), nil
	case "base64", "b64":
		return base64.StdEncoding.DecodeString(value)
	case "gzip+base64", "gz+b64":
		data, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return nil, err
		}
		r, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(r)
	}
	return nil, fmt.Errorf("unknown encoding %q", encoding)
}

// armCustomizationFault: POST /gpusim/vms/{name}/customization-fault {"event": ..., "reason": ...} makes the
// next customization of that VM (by name, so before it is cloned) fail with that event.
func (s *Sim) armCustomizationFault(w http.ResponseWriter, r *http.Request) {
	var f customFault
	if err := DecodeJSON(r, &f); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	switch f.Event {
	case "":
		f.Event = "CustomizationLinuxIdentityFailed"
	case "CustomizationLinuxIdentityFailed", "CustomizationNetworkSetupFailed", "CustomizationUnknownFailure":
	default:
		WriteError(w, http.StatusBadRequest, "unknown customization event %q", f.Event)
		return
	}
	s.guests.arm(r.PathValue("name"), f)
	WriteJSON(w, http.StatusOK, map[string]any{"vm": r.PathValue("name"), "event": f.Event, "reason": f.Reason})
}
