package vc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	"gopkg.in/yaml.v3"
)

// pvrdmaRuleset is whether a host's firewall has the pvrdma ruleset enabled, as its firewall system says.
func (e *env) pvrdmaRuleset(name string) bool {
	e.t.Helper()
	h := e.hostMO(name, "configManager.firewallSystem")
	var fw mo.HostFirewallSystem
	e.must(e.c.RetrieveOne(e.ctx, *h.ConfigManager.FirewallSystem, []string{"firewallInfo"}, &fw))
	for _, r := range fw.FirewallInfo.Ruleset {
		if r.Key == "pvrdma" {
			return r.Enabled
		}
	}
	e.t.Fatalf("%s: no pvrdma ruleset", name)
	return false
}

func TestPVRDMAHostSideIsPerHost(t *testing.T) {
	spec := networkSpec()
	spec.Networks[1].Vmknic = "vmk1"
	e := start(t, spec)
	h := e.hostMO(host1, "config.network", "configManager.advancedOption", "configManager.firewallSystem")
	var vmk1 *types.HostVirtualNic
	for i, v := range h.Config.Network.Vnic {
		if v.Device == "vmk1" {
			vmk1 = &h.Config.Network.Vnic[i]
		}
	}
	if vmk1 == nil || vmk1.Spec.DistributedVirtualPort == nil || len(h.Config.Network.ProxySwitch) != 1 ||
		vmk1.Spec.DistributedVirtualPort.SwitchUuid != h.Config.Network.ProxySwitch[0].DvsUuid {
		t.Fatalf("vmk1 on the distributed switch: %+v, switches %+v", vmk1, h.Config.Network.ProxySwitch)
	}
	if n := len(h.Config.Network.RdmaDevice); n != 2 {
		t.Errorf("RDMA devices: %d", n)
	}
	om := object.NewOptionManager(e.c.Client, *h.ConfigManager.AdvancedOption)
	opts, err := om.Query(e.ctx, PVRDMAOption)
	if err != nil || len(opts) != 1 || opts[0].GetOptionValue().Value != "" {
		t.Fatalf("%s: %v %v", PVRDMAOption, opts, err)
	}
	e.must(om.Update(e.ctx, []types.BaseOptionValue{&types.OptionValue{Key: PVRDMAOption, Value: "vmk1"}}))
	if opts, _ = om.Query(e.ctx, PVRDMAOption); opts[0].GetOptionValue().Value != "vmk1" {
		t.Errorf("after UpdateOptions: %v", opts[0].GetOptionValue().Value)
	}
	if e.pvrdmaRuleset(host1) || e.pvrdmaRuleset(host2) {
		t.Fatal("the pvrdma ruleset is disabled on a new host")
	}
	_, err = methods.EnableRuleset(e.ctx, e.c.Client, &types.EnableRuleset{This: *h.ConfigManager.FirewallSystem, Id: "pvrdma"})
	e.must(err)
	if !e.pvrdmaRuleset(host1) || e.pvrdmaRuleset(host2) {
		t.Error("enabling the ruleset on one host enables it there only")
	}
}

func TestAVmknicIsANewVmkOnADistributedPortGroup(t *testing.T) {
	for _, bad := range []NetworkSpec{{Name: "mgmt", Vmknic: "vmk1"}, {Name: "roce", Kind: NetworkDistributed, Vmknic: "vmk0"},
		{Name: "roce", Kind: NetworkDistributed, Vmknic: "eth1"}} {
		spec := networkSpec()
		spec.Networks = []NetworkSpec{bad}
		if _, err := New(spec); err == nil || !contains(err.Error(), "must be a new vmkN on a distributed port group") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// The option and the ruleset are vgpuctl's (vgpuctl/data/network.yaml), and the ruleset's ports those vcsim
// captured from a real host.
func TestPVRDMANamesMatchVgpuctlsNetworkRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "vgpuctl", "data", "network.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Host struct {
			Option  string `yaml:"advanced_option"`
			Ruleset string `yaml:"firewall_ruleset"`
			Ports   struct {
				Protocol string `yaml:"protocol"`
				First    int32  `yaml:"first"`
				Last     int32  `yaml:"last"`
			} `yaml:"firewall_ports"`
		} `yaml:"pvrdma_host"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	if rules.Host.Option != PVRDMAOption {
		t.Errorf("option %q != %q", rules.Host.Option, PVRDMAOption)
	}
	e := start(t, networkSpec())
	h := e.hostMO(host1, "configManager.firewallSystem")
	var fw mo.HostFirewallSystem
	e.must(e.c.RetrieveOne(e.ctx, *h.ConfigManager.FirewallSystem, []string{"firewallInfo"}, &fw))
	found := 0
	for _, r := range fw.FirewallInfo.Ruleset {
		if r.Key != rules.Host.Ruleset {
			continue
		}
		for _, rule := range r.Rule {
			found++
			if rule.Protocol != rules.Host.Ports.Protocol || rule.Port != rules.Host.Ports.First ||
				rule.EndPort != rules.Host.Ports.Last {
				t.Errorf("rule %+v", rule)
			}
		}
	}
	if found != 2 { // inbound and outbound
		t.Errorf("%d rules of ruleset %s", found, rules.Host.Ruleset)
	}
}
