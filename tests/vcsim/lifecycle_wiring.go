package main

// Wiring of the vSphere Lifecycle Manager subset (internal/vapi/lifecycle.go) to the farm: the clusters and
// their hosts, the depots, each host's installed NVIDIA component, and a host's remediation through the vSphere
// side (internal/vc/software.go).

import (
	"fmt"
	"net/http/httptest"
	"time"

	"gpusim/internal/farm"
	"gpusim/internal/vapi"
	"gpusim/internal/vc"
)

func init() { registerExtension(startLifecycle) }

// startLifecycle puts the lifecycle routes in front of upstream's /api/.
func startLifecycle(sim *vc.Sim) ([][2]string, func(), error) {
	mux := sim.Model.Service.ServeMux
	upstream, pattern := mux.Handler(httptest.NewRequest("GET", "/api/", nil))
	if pattern == "" {
		return nil, nil, fmt.Errorf("lifecycle: the REST endpoints are not registered")
	}
	l := vapi.NewLifecycle(upstream, &fleet{sim: sim})
	for p, f := range l.Routes() {
		mux.HandleFunc(p, f)
	}
	return nil, nil, nil
}

// fleet is vapi.Fleet over the simulator.
type fleet struct{ sim *vc.Sim }

func (f *fleet) Clusters() map[string]vapi.FleetCluster {
	out := map[string]vapi.FleetCluster{}
	ctx := f.sim.Context()
	for _, e := range ctx.Map.All("ClusterComputeResource") {
		name := e.Entity().Name
		c := vapi.FleetCluster{Name: name, ImageManaged: f.sim.Farm.ImageManaged(name)}
		for _, h := range f.sim.Farm.Hosts() {
			if h.Cluster != name {
				continue
			}
			if ref, ok := f.sim.ResolveObject(h.Name); ok {
				c.Hosts = append(c.Hosts, vapi.FleetHost{Moid: ref.Value, Name: h.Name})
			}
		}
		out[e.Reference().Value] = c
	}
	return out
}

func (f *fleet) Depot(location string) (farm.DepotSpec, error) { return f.sim.Farm.Depot(location) }

func (f *fleet) Installed(host string) (string, string) {
	name, version, _ := f.sim.Farm.InstalledComponent(host)
	return name, version
}

// Remediate waits for a rebooted host three times its reboot time and five seconds more.
func (f *fleet) Remediate(host, location, component string) error {
	wait := 3*time.Duration(f.sim.Spec.RebootSeconds*float64(time.Second)) + 5*time.Second
	return f.sim.Remediate(host, location, component, wait)
}
