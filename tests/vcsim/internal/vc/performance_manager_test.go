package vc

import (
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	gpu0 = "0000:3b:00.0"
	gpu1 = "0000:3c:00.0"
)

// perfManager reads the PerformanceManager's counters and intervals through the property collector.
func (e *env) perfManager() mo.PerformanceManager {
	e.t.Helper()
	var pm mo.PerformanceManager
	ref := *e.c.ServiceContent.PerfManager
	e.must(e.c.RetrieveOne(e.ctx, ref, []string{"perfCounter", "historicalInterval"}, &pm))
	return pm
}

// gpuCounterKey is the key of gpu.<name>.<rollup> in perfCounter.
func (e *env) gpuCounterKey(name, rollup string) int32 {
	e.t.Helper()
	for _, c := range e.perfManager().PerfCounter {
		if c.GroupInfo.GetElementDescription().Key == "gpu" && c.NameInfo.GetElementDescription().Key == name &&
			string(c.RollupType) == rollup {
			return c.Key
		}
	}
	e.t.Fatalf("no counter gpu.%s.%s", name, rollup)
	return 0
}

func (e *env) queryPerf(specs ...types.PerfQuerySpec) ([]types.BasePerfEntityMetricBase, error) {
	req := types.QueryPerf{This: *e.c.ServiceContent.PerfManager, QuerySpec: specs}
	res, err := methods.QueryPerf(e.ctx, e.c.Client, &req)
	if err != nil {
		return nil, err
	}
	return res.Returnval, nil
}

func (e *env) hostSpec(host string, interval int32, start *time.Time, ids ...int32) types.PerfQuerySpec {
	spec := types.PerfQuerySpec{Entity: e.host(host).Reference(), IntervalId: interval, StartTime: start}
	for _, id := range ids {
		spec.MetricId = append(spec.MetricId, types.PerfMetricId{CounterId: id, Instance: "*"})
	}
	return spec
}

// seriesOf maps each series of a result to its instance's values.
func seriesOf(t *testing.T, m types.BasePerfEntityMetricBase) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for _, v := range m.(*types.PerfEntityMetric).Value {
		s := v.(*types.PerfMetricIntSeries)
		out[s.Id.Instance] = s.Value
	}
	return out
}

func TestPerfCountersAreVCentersGPUGroupPlusPower(t *testing.T) {
	e := start(t, smallSpec())
	pm := e.perfManager()
	found := map[string]types.PerfCounterInfo{}
	for _, c := range pm.PerfCounter {
		if c.GroupInfo.GetElementDescription().Key == "gpu" {
			found[c.NameInfo.GetElementDescription().Key+"."+string(c.RollupType)] = c
		}
	}
	for name, unit := range map[string]string{"utilization.average": "percent", "utilization.maximum": "percent",
		"mem.used.average": "kiloBytes", "mem.usage.average": "percent", "temperature.average": "celsius",
		"power.used.average": "watt"} {
		c, ok := found[name]
		if !ok || c.UnitInfo.GetElementDescription().Key != unit || c.Level != 4 {
			t.Fatalf("gpu.%s: %+v", name, c)
		}
	}
	for i, iv := range pm.HistoricalInterval {
		if iv.Key != int32(i+1) || iv.Level != 1 {
			t.Fatalf("interval %d: %+v", i, iv)
		}
	}
}

func TestPerfAvailableMetricsPerGPUInstance(t *testing.T) {
	e := start(t, smallSpec())
	util := e.gpuCounterKey(gpuUtilization, "average")
	available := func(interval int32) map[string]bool {
		req := types.QueryAvailablePerfMetric{This: *e.c.ServiceContent.PerfManager,
			Entity: e.host(host1).Reference(), IntervalId: interval}
		res, err := methods.QueryAvailablePerfMetric(e.ctx, e.c.Client, &req)
		e.must(err)
		out := map[string]bool{}
		for _, id := range res.Returnval {
			if id.CounterId == util {
				out[id.Instance] = true
			}
		}
		return out
	}
	if got := available(20); len(got) != 4 || !got[gpu0] || !got["0000:5f:00.0"] {
		t.Fatalf("realtime: %v", got)
	}
	if got := available(1800); len(got) != 0 {
		t.Fatalf("level 1 past week offers gpu counters: %v", got)
	}
	if code, out := e.control("POST", "/gpusim/perf", map[string]any{"statistics_level": 4}); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	if got := available(1800); len(got) != 4 {
		t.Fatalf("level 4 past week: %v", got)
	}
}

func TestPerfDefaultPatternFollowsRunningVGPUs(t *testing.T) {
	e := start(t, smallSpec())
	vm := e.vm("vm-a")
	e.must(e.addVGPUs(vm, "grid_a100-20c"))
	e.must(e.wait(vm.PowerOn(e.ctx)))
	util, used := e.gpuCounterKey(gpuUtilization, "average"), e.gpuCounterKey(gpuMemUsed, "average")
	res, err := e.queryPerf(e.hostSpec(host1, 20, nil, util), e.hostSpec(host1, 20, nil, used))
	e.must(err)
	byGPU, mem := seriesOf(t, res[0]), seriesOf(t, res[1])
	if len(res[0].(*types.PerfEntityMetric).SampleInfo) != 180 || len(byGPU) != 4 {
		t.Fatalf("want 180 realtime samples per GPU: %+v", res[0])
	}
	if byGPU[gpu0][179] != 6000 || byGPU[gpu1][179] != 0 {
		t.Fatalf("busy GPU 60%% (6000), idle 0: %v %v", byGPU[gpu0][179], byGPU[gpu1][179])
	}
	if mem[gpu0][0] != 20*1024*1024 || mem[gpu1][0] != 0 {
		t.Fatalf("memory used follows the vGPU: %v", mem)
	}
}

func TestPerfSeriesSetThroughTheControlEndpoint(t *testing.T) {
	e := start(t, smallSpec())
	body := map[string]any{"statistics_level": 4, "series": []map[string]any{{"host": host1, "gpu": gpu1,
		"counter": "utilization", "points": []map[string]float64{{"ago_s": 7200, "value": 3}, {"ago_s": 1800, "value": 90}}}}}
	if code, out := e.control("POST", "/gpusim/perf", body); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	avg, peak := e.gpuCounterKey(gpuUtilization, "average"), e.gpuCounterKey(gpuUtilization, "maximum")
	res, err := e.queryPerf(e.hostSpec(host1, 20, nil, avg))
	e.must(err)
	realtime := seriesOf(t, res[0])[gpu1]
	if realtime[0] != 300 || realtime[len(realtime)-1] != 9000 {
		t.Fatalf("3%% an hour ago, 90%% now: %v", realtime)
	}
	since := time.Now().Add(-3 * time.Hour)
	res, err = e.queryPerf(e.hostSpec(host1, 300, &since, avg, peak))
	e.must(err)
	metric := res[0].(*types.PerfEntityMetric)
	first := metric.SampleInfo[0]
	if first.Interval != 300 || first.Timestamp.Unix()%300 != 0 {
		t.Fatalf("5-minute samples end on 5-minute marks: %+v", first)
	}
	var values []int64
	for _, v := range metric.Value {
		if s := v.(*types.PerfMetricIntSeries); s.Id.Instance == gpu1 && s.Id.CounterId == peak {
			values = s.Value
		}
	}
	if values[0] != -1 || values[len(values)-1] != 9000 {
		t.Fatalf("no data before the series starts (-1), 90%% at the end: %v", values)
	}
}

func TestPerfHistoricalIntervalsHoldGPUCountersOnlyAtLevel4(t *testing.T) {
	e := start(t, smallSpec())
	util := e.gpuCounterKey(gpuUtilization, "average")
	since := time.Now().Add(-48 * time.Hour)
	res, err := e.queryPerf(e.hostSpec(host1, 1800, &since, util))
	e.must(err)
	if len(res[0].(*types.PerfEntityMetric).Value) != 0 {
		t.Fatal("level 1 keeps no gpu counters")
	}
	e.control("POST", "/gpusim/perf", map[string]any{"statistics_level": 4})
	res, err = e.queryPerf(e.hostSpec(host1, 1800, &since, util))
	e.must(err)
	if got := len(res[0].(*types.PerfEntityMetric).SampleInfo); got != 96 && got != 97 {
		t.Fatalf("two days of 30-minute samples: %d", got)
	}
	if _, err := e.queryPerf(e.hostSpec(host1, 600, nil, util)); err == nil {
		t.Fatal("no interval samples every 600 s")
	}
}

func TestPerfManyHostsInOneCallAreCounted(t *testing.T) {
	e := start(t, smallSpec())
	util := e.gpuCounterKey(gpuUtilization, "average")
	res, err := e.queryPerf(e.hostSpec(host1, 20, nil, util), e.hostSpec("esx-02.gpu.sim", 20, nil, util))
	e.must(err)
	if len(res) != 2 || res[1].GetPerfEntityMetricBase().Entity != e.host("esx-02.gpu.sim").Reference() {
		t.Fatalf("one entity per spec: %+v", res)
	}
	_, out := e.control("GET", "/gpusim/perf", nil)
	if out["queries"] != float64(1) || out["specs"] != float64(2) {
		t.Fatalf("counted: %v", out)
	}
	mixed := e.hostSpec(host1, 20, nil, util)
	mixed.MetricId = append(mixed.MetricId, types.PerfMetricId{CounterId: 2}) // cpu.usage.average
	if _, err := e.queryPerf(mixed); err == nil {
		t.Fatal("a spec mixing groups is refused")
	}
}

func TestPerfArmedFaultRefusesTheQuery(t *testing.T) {
	e := start(t, smallSpec())
	util := e.gpuCounterKey(gpuUtilization, "average")
	if code, out := e.control("POST", "/gpusim/faults", map[string]any{"object": "PerfMgr", "method": "QueryPerf",
		"fault": "NoPermission"}); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	_, err := e.queryPerf(e.hostSpec(host1, 20, nil, util))
	var fault any
	if soap.IsSoapFault(err) {
		fault = soap.ToSoapFault(err).VimFault()
	}
	if _, ok := fault.(types.NoPermission); !ok {
		t.Fatalf("want NoPermission, got %v", err)
	}
	if _, err := e.queryPerf(e.hostSpec(host1, 20, nil, util)); err != nil {
		t.Fatalf("the fault was armed once: %v", err)
	}
}

func TestPerfControlRefusesBadSeries(t *testing.T) {
	e := start(t, smallSpec())
	for _, body := range []map[string]any{
		{"series": []map[string]any{{"host": "nope", "counter": "utilization", "points": []map[string]float64{{"value": 1}}}}},
		{"series": []map[string]any{{"host": host1, "counter": "fan", "points": []map[string]float64{{"value": 1}}}}},
		{"series": []map[string]any{{"host": host1, "counter": "utilization", "points": []map[string]float64{{"value": 101}}}}},
		{"series": []map[string]any{{"host": host1, "gpu": "0000:99:00.0", "counter": "utilization", "points": []map[string]float64{{"value": 1}}}}},
		{"series": []map[string]any{{"host": host1, "counter": "utilization"}}},
		{"pattern": "sometimes"},
		{"statistics_level": 5},
	} {
		if code, out := e.control("POST", "/gpusim/perf", body); code != 400 || out["error"] == nil {
			t.Fatalf("%v: %d %v", body, code, out)
		}
	}
	if code, out := e.control("POST", "/gpusim/perf", map[string]any{"pattern": "busy"}); code != 200 || out["pattern"] != "busy" {
		t.Fatalf("%d %v", code, out)
	}
	util := e.gpuCounterKey(gpuUtilization, "average")
	res, err := e.queryPerf(e.hostSpec(host1, 20, nil, util))
	e.must(err)
	if v := seriesOf(t, res[0])[gpu1]; v[len(v)-1] != 6000 {
		t.Fatalf("busy pattern: %v", v)
	}
	if _, out := e.control("DELETE", "/gpusim/perf", nil); out["pattern"] != patternByVGPUs {
		t.Fatalf("cleared: %v", out)
	}
}
