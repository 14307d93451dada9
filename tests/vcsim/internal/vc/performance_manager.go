package vc

// PerformanceManager's GPU counters. govmomi's simulator serves vCenter's perfCounter list (captured from a
// real vCenter: the gpu group's utilization, mem.used and mem.usage with the none, average, maximum and
// minimum rollups, temperature with average, all at statistics level 4) but no GPU instances and no GPU
// values. gpusim adds gpu.power.used (watt, average, level 4: its rollup and level are gpusim's assumption,
// newer ESXi hosts report the counter), answers QueryAvailablePerfMetric with the counters per GPU instance of
// a host (the instance is the GPU's PCI id), and answers QueryPerf for them from the series of
// perf_series.go, realtime (20 s for the last hour) or rolled up for a historical interval, which holds data
// only while its statistics level reaches the counter's. Everything else is upstream's.

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	"github.com/vmware/govmomi/vim25/xml"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// gpuCounter is one counter of the gpu group as perfCounter lists it.
type gpuCounter struct {
	Key    int32  `json:"key"`
	Name   string `json:"name"`   // nameInfo.key: utilization, mem.used, ...
	Rollup string `json:"rollup"` // rollupType
	Unit   string `json:"unit"`   // unitInfo.key
	Level  int32  `json:"level"`
}

// perfState is gpusim's side of the PerformanceManager: its counters and series.
type perfState struct {
	ref      types.ManagedObjectReference
	counters map[int32]gpuCounter
	book     *perfBook
}

var perfMethods = map[string]bool{"QueryPerf": true, "QueryAvailablePerfMetric": true}

// setupPerf finds the gpu counters, adds gpu.power.used, and numbers the historical intervals 1 to 4 as
// vCenter does (the captured list repeats key 1).
func (s *Sim) setupPerf() {
	pm := s.ctx.Map.Get(*s.Model.ServiceContent.PerfManager).(*simulator.PerformanceManager)
	s.perf = &perfState{ref: pm.Self, counters: map[int32]gpuCounter{}, book: newPerfBook()}
	counters := append([]types.PerfCounterInfo(nil), pm.PerfCounter...) // the list is shared by every model
	var next int32
	for _, c := range counters {
		next = max(next, c.Key+1)
		if c.GroupInfo.GetElementDescription().Key == "gpu" {
			s.perf.counters[c.Key] = counterOf(c)
		}
	}
	power := types.PerfCounterInfo{
		Key:            next,
		NameInfo:       &types.ElementDescription{Description: types.Description{Label: "Power used", Summary: "The amount of power used by a GPU in watts"}, Key: gpuPowerUsed},
		GroupInfo:      &types.ElementDescription{Description: types.Description{Label: "GPU", Summary: "GPU"}, Key: "gpu"},
		UnitInfo:       &types.ElementDescription{Description: types.Description{Label: "W", Summary: "Watt"}, Key: "watt"},
		RollupType:     types.PerfSummaryTypeAverage,
		StatsType:      types.PerfStatsTypeAbsolute,
		Level:          4,
		PerDeviceLevel: 4,
	}
	pm.PerfCounter = append(counters, power)
	s.perf.counters[power.Key] = counterOf(power)
	intervals := append([]types.PerfInterval(nil), pm.HistoricalInterval...)
	for i := range intervals {
		intervals[i].Key = int32(i + 1)
	}
	pm.HistoricalInterval = intervals
	s.registerPerfControl()
}

func counterOf(c types.PerfCounterInfo) gpuCounter {
	return gpuCounter{Key: c.Key, Name: c.NameInfo.GetElementDescription().Key, Rollup: string(c.RollupType),
		Unit: c.UnitInfo.GetElementDescription().Key, Level: c.Level}
}

// gpuPerf answers the GPU counters of hosts; the rest goes to upstream's PerformanceManager.
type gpuPerf struct {
	*simulator.PerformanceManager

	sim *Sim
}

func (p *gpuPerf) QueryAvailablePerfMetric(ctx *simulator.Context, req *types.QueryAvailablePerfMetric) soap.HasFault {
	if res, ok := redirected(ctx, p, "QueryAvailablePerfMetric", req); ok {
		return res
	}
	body := p.PerformanceManager.QueryAvailablePerfMetric(ctx, req).(*methods.QueryAvailablePerfMetricBody)
	host := p.sim.hostOf(&req.Entity)
	info, err := p.sim.Farm.Host(host)
	if err != nil || body.Res == nil {
		return body
	}
	level, ok := p.intervalLevel(req.IntervalId)
	if !ok {
		return body
	}
	for _, c := range p.sortedCounters() {
		if c.Level > level {
			continue
		}
		for _, g := range info.GPUs {
			body.Res.Returnval = append(body.Res.Returnval, types.PerfMetricId{CounterId: c.Key, Instance: g.PCIID})
		}
	}
	return body
}

func (p *gpuPerf) sortedCounters() []gpuCounter {
	out := make([]gpuCounter, 0, len(p.sim.perf.counters))
	for _, c := range p.sim.perf.counters {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// interval is the sampling period and retention a query's intervalId names (0 and 20: realtime), and the
// statistics level it collects at (realtime: every counter); false for no enabled interval of that period.
func (p *gpuPerf) interval(id int32) (period int32, keep time.Duration, level int32, ok bool) {
	if id == 0 || id == realtimeSeconds {
		return realtimeSeconds, realtimeKeep, math.MaxInt32, true
	}
	for _, iv := range p.HistoricalInterval {
		if iv.Enabled && iv.SamplingPeriod == id {
			return id, time.Duration(iv.Length) * time.Second, iv.Level, true
		}
	}
	return 0, 0, 0, false
}

func (p *gpuPerf) intervalLevel(id int32) (int32, bool) {
	_, _, level, ok := p.interval(id)
	return level, ok
}

func (p *gpuPerf) QueryPerf(ctx *simulator.Context, req *types.QueryPerf) soap.HasFault {
	if res, ok := redirected(ctx, p, "QueryPerf", req); ok {
		return res
	}
	p.sim.perf.book.counted(len(req.QuerySpec))
	body := &methods.QueryPerfBody{Res: &types.QueryPerfResponse{}}
	for _, qs := range req.QuerySpec {
		gpu, other := p.split(qs.MetricId)
		if gpu == 0 {
			up := p.PerformanceManager.QueryPerf(ctx, &types.QueryPerf{This: req.This, QuerySpec: []types.PerfQuerySpec{qs}})
			res := up.(*methods.QueryPerfBody)
			if res.Fault_ != nil {
				return res
			}
			body.Res.Returnval = append(body.Res.Returnval, res.Res.Returnval...)
			continue
		}
		if other > 0 {
			return invalid("querySpec.metricId", "gpusim answers gpu counters in a query spec of their own")
		}
		metric, fault := p.gpuMetric(qs)
		if fault != nil {
			return &methods.QueryPerfBody{Fault_: fault}
		}
		body.Res.Returnval = append(body.Res.Returnval, metric)
	}
	return body
}

func invalid(property, msg string) soap.HasFault {
	return &methods.QueryPerfBody{Fault_: fault.InvalidArgument(property, msg)}
}

// split counts a spec's metric ids of the gpu group and of other groups.
func (p *gpuPerf) split(ids []types.PerfMetricId) (gpu, other int) {
	for _, id := range ids {
		if _, ok := p.sim.perf.counters[id.CounterId]; ok {
			gpu++
		} else {
			other++
		}
	}
	return gpu, other
}

// gpuMetric answers one spec of gpu counters: an entity with one series per counter and GPU instance the
// interval holds (none for a counter above the interval's statistics level, none for other entities).
func (p *gpuPerf) gpuMetric(qs types.PerfQuerySpec) (types.BasePerfEntityMetricBase, *soap.Fault) {
	period, keep, level, ok := p.interval(qs.IntervalId)
	if !ok {
		return nil, fault.InvalidArgument("querySpec.interval", fmt.Sprintf("no enabled interval of %d s", qs.IntervalId))
	}
	now := p.sim.perf.book.now().UTC()
	from, to := now.Add(-keep), now
	if qs.StartTime != nil && qs.StartTime.After(from) {
		from = *qs.StartTime
	}
	if qs.EndTime != nil && qs.EndTime.Before(to) {
		to = *qs.EndTime
	}
	times := sampleTimes(period, from, to)
	if qs.MaxSample > 0 && len(times) > int(qs.MaxSample) {
		times = times[len(times)-int(qs.MaxSample):]
	}
	metric := &types.PerfEntityMetric{PerfEntityMetricBase: types.PerfEntityMetricBase{Entity: qs.Entity}}
	host := p.sim.hostOf(&qs.Entity)
	info, err := p.sim.Farm.Host(host)
	if err != nil || qs.Entity.Type != "HostSystem" {
		return p.formatted(qs, metric), nil
	}
	for _, t := range times {
		metric.SampleInfo = append(metric.SampleInfo, types.PerfSampleInfo{Timestamp: t, Interval: period})
	}
	for _, id := range qs.MetricId {
		c := p.sim.perf.counters[id.CounterId]
		if c.Level > level {
			continue // not collected at this interval's statistics level
		}
		for _, g := range instances(info, id.Instance) {
			values := p.values(host, g, c, period, times)
			metric.Value = append(metric.Value, &perfIntSeries{
				PerfMetricSeries: types.PerfMetricSeries{Id: types.PerfMetricId{CounterId: c.Key, Instance: g.PCIID}},
				Value:            values,
			})
		}
	}
	return p.formatted(qs, metric), nil
}

// instances are the GPUs a metric id's instance names: "*" all of them, a PCI id that GPU ("" is the host's
// aggregate, which gpusim does not model).
func instances(info farm.HostInfo, instance string) []farm.GPUInfo {
	var out []farm.GPUInfo
	for _, g := range info.GPUs {
		if instance == "*" || instance == g.PCIID {
			out = append(out, g)
		}
	}
	return out
}

// values are the samples ending at times, each rolled up over its period; -1 where the series has no data. The
// series' steps are read once for the whole query and walked sample by sample.
func (p *gpuPerf) values(host string, g farm.GPUInfo, c gpuCounter, period int32, times []time.Time) []int64 {
	out := make([]int64, len(times))
	if len(times) == 0 {
		return out
	}
	d := time.Duration(period) * time.Second
	all := p.sim.perf.book.steps(host, g, c.Name, p.sim.Farm.Catalog(), times[0].Add(-d), times[len(times)-1])
	first := 0
	for i, t := range times {
		from := t.Add(-d)
		for first < len(all) && !all[first].To.After(from) {
			first++ // ends before this sample starts
		}
		var in []step
		for k := first; k < len(all) && all[k].From.Before(t); k++ {
			in = append(in, clip(all[k], from, t))
		}
		out[i] = -1
		if v, ok := aggregate(in, c.Rollup); ok {
			out[i] = fixedPoint(v, c.Unit)
		}
	}
	return out
}

// clip is the part of s inside [from, to).
func clip(s step, from, to time.Time) step {
	if s.From.Before(from) {
		s.From = from
	}
	if s.To.After(to) {
		s.To = to
	}
	return s
}

// formatted is the metric in the spec's format: normal, or csv.
func (p *gpuPerf) formatted(qs types.PerfQuerySpec, m *types.PerfEntityMetric) types.BasePerfEntityMetricBase {
	if qs.Format != string(types.PerfFormatCsv) {
		return m
	}
	csv := &types.PerfEntityMetricCSV{PerfEntityMetricBase: m.PerfEntityMetricBase}
	var info []string
	for _, s := range m.SampleInfo {
		info = append(info, strconv.Itoa(int(s.Interval)), s.Timestamp.Format(time.RFC3339))
	}
	csv.SampleInfoCSV = strings.Join(info, ",")
	for _, v := range m.Value {
		series := v.(*perfIntSeries)
		parts := make([]string, len(series.Value))
		for i, x := range series.Value {
			parts[i] = strconv.FormatInt(x, 10)
		}
		csv.Value = append(csv.Value, types.PerfMetricSeriesCSV{PerfMetricSeries: series.PerfMetricSeries, Value: strings.Join(parts, ",")})
	}
	return csv
}

// perfIntSeries is a PerfMetricIntSeries that keeps its zeros: the simulator's XML encoder applies the
// value field's omitempty to each element of the slice, so an idle GPU's 0 samples would vanish.
type perfIntSeries struct {
	types.PerfMetricSeries

	Value []int64
}

func (s perfIntSeries) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	for i, a := range start.Attr {
		if a.Name.Local == "type" {
			start.Attr[i].Value = "PerfMetricIntSeries"
		}
	}
	if err := e.EncodeToken(start); err != nil {
		return err
	}
	if err := e.EncodeElement(s.Id, xml.StartElement{Name: xml.Name{Local: "id"}}); err != nil {
		return err
	}
	for _, v := range s.Value {
		if err := e.EncodeElement(v, xml.StartElement{Name: xml.Name{Local: "value"}}); err != nil {
			return err
		}
	}
	return e.EncodeToken(start.End())
}

// ------------------------------------------------------------------------------------------ control

type perfSeriesRequest struct {
	Host    string           `json:"host"`
	GPU     string           `json:"gpu"`     // PCI id; "" every GPU of the host
	Counter string           `json:"counter"` // utilization, mem.used, mem.usage, temperature, power.used
	Points  []perfPointInput `json:"points"`
}

type perfPointInput struct {
	AgoS  float64 `json:"ago_s"` // seconds before the request
	Value float64 `json:"value"` // percent 0-100, kiloBytes, celsius or watt
}

type perfRequest struct {
	Series          []perfSeriesRequest `json:"series"`
	Pattern         string              `json:"pattern"`
	StatisticsLevel int32               `json:"statistics_level"` // every historical interval's level (1-4)
}

func (s *Sim) registerPerfControl() {
	s.HandleControl("GET /gpusim/perf", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, http.StatusOK, s.perfView()) })
	s.HandleControl("POST /gpusim/perf", s.setPerf)
	s.HandleControl("DELETE /gpusim/perf", func(w http.ResponseWriter, r *http.Request) {
		s.perf.book.clear()
		WriteJSON(w, http.StatusOK, s.perfView())
	})
}

func (s *Sim) setPerf(w http.ResponseWriter, r *http.Request) {
	var req perfRequest
	if err := DecodeJSON(r, &req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	now := s.perf.book.now().UTC()
	sets := map[perfKey][]perfPoint{}
	for _, sr := range req.Series {
		keys, points, err := s.perfSeries(sr, now)
		if err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
		for _, k := range keys {
			sets[k] = points
		}
	}
	if req.StatisticsLevel != 0 && (req.StatisticsLevel < 1 || req.StatisticsLevel > 4) {
		WriteError(w, http.StatusBadRequest, "statistics_level must be 1 to 4")
		return
	}
	if req.Pattern != "" {
		if err := s.perf.book.setPattern(req.Pattern); err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	for k, points := range sets {
		s.perf.book.set(k, points)
	}
	if req.StatisticsLevel != 0 {
		s.setStatisticsLevel(req.StatisticsLevel)
	}
	WriteJSON(w, http.StatusOK, s.perfView())
}

// perfSeries checks one series of the request: the keys it sets and its points in time.
func (s *Sim) perfSeries(sr perfSeriesRequest, now time.Time) ([]perfKey, []perfPoint, error) {
	info, err := s.Farm.Host(sr.Host)
	if err != nil {
		return nil, nil, err
	}
	known := false
	for _, c := range s.perf.counters {
		known = known || c.Name == sr.Counter
	}
	if !known {
		return nil, nil, fmt.Errorf("unknown gpu counter %q (known: %s)", sr.Counter, strings.Join(s.perfCounterNames(), ", "))
	}
	if len(sr.Points) == 0 {
		return nil, nil, fmt.Errorf("series %s %s %s has no points", sr.Host, sr.GPU, sr.Counter)
	}
	var points []perfPoint
	for _, pt := range sr.Points {
		bad := math.IsNaN(pt.Value) || math.IsInf(pt.Value, 0) || pt.Value < 0 || pt.AgoS < 0 || math.IsInf(pt.AgoS, 0)
		if bad || ((sr.Counter == gpuUtilization || sr.Counter == gpuMemUsage) && pt.Value > 100) {
			return nil, nil, fmt.Errorf("series %s %s: point %+v out of range", sr.Host, sr.Counter, pt)
		}
		points = append(points, perfPoint{At: now.Add(-time.Duration(pt.AgoS * float64(time.Second))), Value: pt.Value})
	}
	var keys []perfKey
	for _, g := range info.GPUs {
		if sr.GPU == "" || sr.GPU == g.PCIID {
			keys = append(keys, perfKey{sr.Host, g.PCIID, sr.Counter})
		}
	}
	if len(keys) == 0 {
		return nil, nil, fmt.Errorf("host %s has no GPU %q", sr.Host, sr.GPU)
	}
	return keys, points, nil
}

func (s *Sim) perfCounterNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, c := range s.perf.counters {
		if !seen[c.Name] {
			seen[c.Name] = true
			names = append(names, c.Name)
		}
	}
	sort.Strings(names)
	return names
}

// setStatisticsLevel sets every historical interval's level, as vCenter's statistics settings do.
func (s *Sim) setStatisticsLevel(level int32) {
	pm := s.ctx.Map.Get(s.perf.ref).(*simulator.PerformanceManager)
	ctx := &simulator.Context{Map: s.ctx.Map}
	s.ctx.Map.WithLock(ctx, pm, func() {
		intervals := append([]types.PerfInterval(nil), pm.HistoricalInterval...)
		for i := range intervals {
			intervals[i].Level = level
		}
		pm.HistoricalInterval = intervals
	})
}

func (s *Sim) perfView() map[string]any {
	b := s.perf.book
	b.mu.Lock()
	defer b.mu.Unlock()
	var series []map[string]any
	now := b.now().UTC()
	for k, points := range b.series {
		var pts []map[string]float64
		for _, p := range points {
			pts = append(pts, map[string]float64{"ago_s": now.Sub(p.At).Seconds(), "value": p.Value})
		}
		series = append(series, map[string]any{"host": k.host, "gpu": k.gpu, "counter": k.counter, "points": pts})
	}
	sort.Slice(series, func(i, j int) bool {
		return fmt.Sprint(series[i]["host"], series[i]["gpu"], series[i]["counter"]) <
			fmt.Sprint(series[j]["host"], series[j]["gpu"], series[j]["counter"])
	})
	pm := s.ctx.Map.Get(s.perf.ref).(*simulator.PerformanceManager)
	var counters []gpuCounter
	for _, c := range s.perf.counters {
		counters = append(counters, c)
	}
	sort.Slice(counters, func(i, j int) bool { return counters[i].Key < counters[j].Key })
	return map[string]any{"pattern": b.pattern, "series": series, "queries": b.queries, "specs": b.specs,
		"counters": counters, "intervals": pm.HistoricalInterval}
}
