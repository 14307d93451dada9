package vc

// The GPU series behind PerformanceManager's gpu counters (performance_manager.go): per host, GPU (PCI id) and counter a
// step function of time set through the control endpoint, else a default pattern; and the samples a query
// interval takes from it.

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"gpusim/internal/farm"
)

// The gpu group's counter names (PerfCounterInfo.nameInfo.key), and the units their values are set in.
const (
	gpuUtilization = "utilization" // percent (0-100; vSphere answers hundredths)
	gpuMemUsed     = "mem.used"    // kiloBytes
	gpuMemUsage    = "mem.usage"   // percent of the GPU's memory
	gpuTemperature = "temperature" // celsius
	gpuPowerUsed   = "power.used"  // watt
)

// realtimeSeconds is the sampling period of realtime statistics, and realtimeKeep how long hosts keep them
// (vSphere Web Services SDK Programming Guide, "Using the QueryPerf Method as a Raw Data Feed").
const (
	realtimeSeconds = 20
	realtimeKeep    = time.Hour
)

// Default patterns: by-vgpus (a GPU where a running VM holds a vGPU is busy, the others idle), idle, busy.
const (
	patternByVGPUs = "by-vgpus"
	patternIdle    = "idle"
	patternBusy    = "busy"
)

// What an idle and a busy GPU report in the default patterns (memory used follows the vGPUs either way).
var (
	idleFigures = map[string]float64{gpuUtilization: 0, gpuTemperature: 30, gpuPowerUsed: 45}
	busyFigures = map[string]float64{gpuUtilization: 60, gpuTemperature: 65, gpuPowerUsed: 250}
)

// perfPoint starts a step: the value holds from At until the next point.
type perfPoint struct {
	At    time.Time
	Value float64
}

type perfKey struct{ host, gpu, counter string }

// perfBook holds the series set through the control endpoint and counts the queries answered.
type perfBook struct {
	mu      sync.Mutex
	series  map[perfKey][]perfPoint // sorted by At
	pattern string
	queries int // QueryPerf calls answered
	specs   int // PerfQuerySpecs in them
	now     func() time.Time
}

func newPerfBook() *perfBook {
	return &perfBook{series: map[perfKey][]perfPoint{}, pattern: patternByVGPUs, now: time.Now}
}

// set replaces the series of (host, gpu, counter) with points (any order).
func (b *perfBook) set(k perfKey, points []perfPoint) {
	sorted := append([]perfPoint(nil), points...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].At.Before(sorted[j].At) })
	b.mu.Lock()
	b.series[k] = sorted
	b.mu.Unlock()
}

func (b *perfBook) setPattern(p string) error {
	if p != patternByVGPUs && p != patternIdle && p != patternBusy {
		return fmt.Errorf("unknown pattern %q (known: %s, %s, %s)", p, patternByVGPUs, patternIdle, patternBusy)
	}
	b.mu.Lock()
	b.pattern = p
	b.mu.Unlock()
	return nil
}

func (b *perfBook) clear() {
	b.mu.Lock()
	b.series, b.pattern = map[perfKey][]perfPoint{}, patternByVGPUs
	b.mu.Unlock()
}

func (b *perfBook) counted(specs int) {
	b.mu.Lock()
	b.queries++
	b.specs += specs
	b.mu.Unlock()
}

// step is one stretch of constant value [From, To).
type step struct {
	From, To time.Time
	Value    float64
}

// steps are the stretches of (host, gpu, counter) inside [from, to): the series set for it (nothing before its
// first point: no data), else the default pattern for the GPU as it is now (data at every time).
func (b *perfBook) steps(host string, gpu farm.GPUInfo, counter string, cat *farm.Catalog, from, to time.Time) []step {
	b.mu.Lock()
	points, set := b.series[perfKey{host, gpu.PCIID, counter}]
	pattern := b.pattern
	b.mu.Unlock()
	if !set {
		v, ok := b.defaultValue(host, gpu, counter, pattern, cat, from, to)
		if !ok {
			return nil
		}
		return []step{{from, to, v}}
	}
	var out []step
	for i, p := range points {
		end := to
		if i+1 < len(points) && points[i+1].At.Before(end) {
			end = points[i+1].At
		}
		start := p.At
		if start.Before(from) {
			start = from
		}
		if start.Before(end) {
			out = append(out, step{start, end, p.Value})
		}
	}
	return out
}

// defaultValue is what the default pattern gives the GPU: memory from its vGPUs (mem.usage from mem.used as
// set or derived), the rest by whether the GPU counts as busy.
func (b *perfBook) defaultValue(host string, gpu farm.GPUInfo, counter, pattern string, cat *farm.Catalog,
	from, to time.Time) (float64, bool) {
	switch counter {
	case gpuMemUsed:
		return usedKB(gpu, cat), true
	case gpuMemUsage:
		total := float64(gpuMemoryKB(gpu))
		used := b.steps(host, gpu, gpuMemUsed, cat, from, to)
		if total <= 0 || len(used) == 0 {
			return 0, false
		}
		return math.Min(100, 100*used[len(used)-1].Value/total), true
	}
	busy := pattern == patternBusy || (pattern == patternByVGPUs && len(gpu.VGPUs) > 0)
	figures := idleFigures
	if busy {
		figures = busyFigures
	}
	v, ok := figures[counter]
	return v, ok
}

// usedKB is the framebuffer the GPU's vGPUs take (whole GiB per vGPU, as vSphere sizes profiles), in kB.
func usedKB(gpu farm.GPUInfo, cat *farm.Catalog) float64 {
	var gib int64
	for _, v := range gpu.VGPUs {
		if p, err := cat.Profile(v.Profile); err == nil {
			gib += p.FbGiB()
		}
	}
	return float64(gib * 1024 * 1024)
}

func gpuMemoryKB(gpu farm.GPUInfo) int64 {
	if gpu.Model == nil {
		return 0
	}
	return int64(gpu.Model.FramebufferGB) * 1024 * 1024
}

// aggregate rolls the steps over (from, to] into one value by rollup (average, maximum, minimum; none and
// latest: the average over the sample, which is what a 20 s sample is); false when no step covers it.
func aggregate(steps []step, rollup string) (float64, bool) {
	var weighted, seconds float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range steps {
		d := s.To.Sub(s.From).Seconds()
		if d <= 0 {
			continue
		}
		weighted += s.Value * d
		seconds += d
		lo, hi = math.Min(lo, s.Value), math.Max(hi, s.Value)
	}
	if seconds == 0 {
		return 0, false
	}
	switch rollup {
	case "maximum":
		return hi, true
	case "minimum":
		return lo, true
	}
	return weighted / seconds, true
}

// sampleTimes are the ends of the samples of a query: multiples of period in (from, to], oldest first.
func sampleTimes(period int32, from, to time.Time) []time.Time {
	p := int64(period)
	first := (from.Unix()/p + 1) * p
	var out []time.Time
	for t := first; t <= to.Unix(); t += p {
		out = append(out, time.Unix(t, 0).UTC())
	}
	return out
}

// fixedPoint is how vSphere answers a value: percent in hundredths ("PerformanceManager returns fixed point
// integer numbers, so 2067 means 20.67% for percent units", vSphere Web Services API, CPU Counters), others
// whole units.
func fixedPoint(v float64, unit string) int64 {
	if unit == "percent" {
		return int64(math.Round(v * 100))
	}
	return int64(math.Round(v))
}
