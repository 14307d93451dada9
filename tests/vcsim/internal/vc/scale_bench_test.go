package vc

import (
	"context"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
)

// BenchmarkScaleFarm builds 64 hosts x 8 GPUs with 1,000 VMs and reads every VM's
// config.hardware.device in one container-view RetrievePropertiesEx (targets: < 10 s, < 2 s).
// Run: go test -run '^$' -bench ScaleFarm -benchtime 1x ./internal/vc
func BenchmarkScaleFarm(b *testing.B) {
	for i := 0; i < b.N; i++ {
		spec := DefaultSpec()
		spec.Clusters[0].Hosts, spec.Clusters[0].GPUs, spec.VMCount = 64, 8, 1000
		t0 := time.Now()
		sim, err := New(spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := sim.Start("127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		startup := time.Since(t0)
		ctx := context.Background()
		c, err := govmomi.NewClient(ctx, sim.URL, true)
		if err != nil {
			b.Fatal(err)
		}
		m := view.NewManager(c.Client)
		v, err := m.CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
		if err != nil {
			b.Fatal(err)
		}
		var vms []mo.VirtualMachine
		t1 := time.Now()
		if err := v.Retrieve(ctx, []string{"VirtualMachine"}, []string{"config.hardware.device"}, &vms); err != nil {
			b.Fatal(err)
		}
		read := time.Since(t1)
		b.ReportMetric(startup.Seconds(), "startup-s")
		b.ReportMetric(read.Seconds(), "retrieve-s")
		b.Logf("startup %.2fs (target < 10s), RetrievePropertiesEx over %d VMs %.2fs (target < 2s)",
			startup.Seconds(), len(vms), read.Seconds())
		sim.Close()
	}
}
