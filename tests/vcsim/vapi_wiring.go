package main

// Wiring of the vSphere Automation REST side: govmomi's vAPI simulator with its namespace-management
// handlers (VM classes), and gpusim's supervisor routes (internal/vapi: supervisor clusters, namespaces,
// REST faults) for the farm file's `supervisor:` section.

import (
	"fmt"
	"net/http/httptest"

	_ "github.com/vmware/govmomi/vapi/namespace/simulator" // registers the namespace-management handlers

	"gpusim/internal/vapi"
	"gpusim/internal/vc"
)

func init() { registerExtension(startVAPI) }

// enableVAPI makes the simulator serve its REST endpoints (/api, /rest); call it before sim.Start.
func enableVAPI(sim *vc.Sim) { sim.Model.Service.RegisterEndpoints = true }

// startVAPI puts gpusim's supervisor routes in front of upstream's and seeds the farm file's section.
func startVAPI(sim *vc.Sim) ([][2]string, func(), error) {
	mux := sim.Model.Service.ServeMux
	upstream, pattern := mux.Handler(httptest.NewRequest("GET", "/api/", nil))
	if pattern == "" {
		return nil, nil, fmt.Errorf("vapi: the REST endpoints are not registered")
	}
	sup := sim.Spec.Supervisor
	if sup == nil {
		sup = &vapi.Supervisor{}
	}
	moids := map[string]string{} // cluster name -> moid
	var names []string
	for _, e := range sim.Context().Map.All("ClusterComputeResource") {
		moids[e.Entity().Name] = e.Reference().Value
		names = append(names, e.Entity().Name)
	}
	if err := sup.Validate(names); err != nil {
		return nil, nil, err
	}
	clusters := map[string]string{}
	for _, c := range sup.Clusters {
		clusters[moids[c]] = c
	}
	h := vapi.New(upstream, clusters)
	h.HonourMemoryField(sup.MemoryField)
	for name, services := range sup.Services {
		h.RunServices(moids[name], services)
	}
	for p, f := range h.Routes() {
		mux.HandleFunc(p, f)
	}
	sim.HandleControl("/gpusim/vapi/faults", h.ServeFaults)
	for _, c := range sup.VMClasses {
		if err := h.SeedVMClass(sim.Spec.Username, sim.Spec.Password, c); err != nil {
			return nil, nil, err
		}
	}
	for _, n := range sup.Namespaces {
		if err := h.SeedNamespace(n.Name, n.Cluster, n.VMClasses); err != nil {
			return nil, nil, err
		}
	}
	return nil, nil, nil
}
