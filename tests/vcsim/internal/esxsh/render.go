package esxsh

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gpusim/internal/farm"
)

// Pure renderers: each turns the shell's view of a host (view.go) into the exact text the real tool prints.

func onOff(b bool) string {
	if b {
		return "Enabled"
	}
	return "Disabled"
}

func supported(b bool) string {
	if b {
		return "Supported"
	}
	return "Not Supported"
}

// RenderList is `nvidia-smi -L`.
func RenderList(gpus []GPU) string {
	var b strings.Builder
	for _, g := range gpus {
		fmt.Fprintf(&b, "GPU %d: %s (UUID: %s)\n", g.Index, g.Name, g.UUID)
		if !g.MIGCurrent {
			continue
		}
		for i, in := range sortedInstances(g.MIGInstances) {
			fmt.Fprintf(&b, "  MIG %-12sDevice %2d: (UUID: %s)\n", in.Profile, i, migUUID(g.UUID, in))
		}
	}
	return b.String()
}

func sortedInstances(in []MIGInstance) []MIGInstance {
	out := append([]MIGInstance(nil), in...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// migUUID derives a stable MIG device UUID from its GPU and placement.
func migUUID(gpuUUID string, in MIGInstance) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", gpuUUID, in.Profile, in.Start)))
	h := fmt.Sprintf("%x", sum[:16])
	return fmt.Sprintf("MIG-%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
}

// qLine formats one `nvidia-smi -q` key/value line: keys padded to column 42 whatever the indent.
func qLine(b *strings.Builder, indent int, key, value string) {
	label := strings.Repeat(" ", indent) + key
	fmt.Fprintf(b, "%-42s: %s\n", label, value)
}

func qHead(b *strings.Builder, indent int, title string) {
	b.WriteString(strings.Repeat(" ", indent) + title + "\n")
}

// RenderQuery is `nvidia-smi -q [-i ...]`: the sections vgpuctl reads, in the real tool's order and layout.
// attached is the number of GPUs of the host (the real tool prints it even with -i).
func RenderQuery(h Host, gpus []GPU, now time.Time) string {
	var b strings.Builder
	b.WriteString("\n==============NVSMI LOG==============\n\n")
	qLine(&b, 0, "Timestamp", now.UTC().Format("Mon Jan _2 15:04:05 2006"))
	qLine(&b, 0, "Driver Version", h.DriverVersion())
	qLine(&b, 0, "CUDA Version", "Not Found")
	qHead(&b, 0, "vGPU Driver Capability")
	qLine(&b, 8, "Heterogenous Multi-vGPU", "Supported")
	b.WriteString("\n")
	qLine(&b, 0, "Attached GPUs", strconv.Itoa(len(h.GPUs)))
	for _, g := range gpus {
		renderQueryGPU(&b, g)
	}
	return b.String()
}

func migModeValue(g GPU, v bool) string {
	if !g.MIGCapable {
		return "N/A"
	}
	return onOff(v)
}

func renderQueryGPU(b *strings.Builder, g GPU) {
	b.WriteString("GPU " + g.BusID + "\n")
	qLine(b, 4, "Product Name", g.Name)
	qLine(b, 4, "Product Brand", "NVIDIA")
	qLine(b, 4, "Product Architecture", g.Architecture)
	qLine(b, 4, "Display Mode", "Enabled")
	qLine(b, 4, "Display Active", "Disabled")
	qLine(b, 4, "Persistence Mode", "Enabled")
	qHead(b, 4, "vGPU Device Capability")
	qLine(b, 8, "Fractional Multi-vGPU", "Supported")
	qLine(b, 8, "Heterogeneous Time-Slice Profiles", supported(g.HeterogeneousTypes))
	qLine(b, 8, "Heterogeneous Time-Slice Sizes", "Supported")
	qHead(b, 4, "MIG Mode")
	qLine(b, 8, "Current", migModeValue(g, g.MIGCurrent))
	qLine(b, 8, "Pending", migModeValue(g, g.MIGPending))
	qHead(b, 4, "Ecc Mode")
	qLine(b, 8, "Current", onOff(g.ECCCurrent))
	qLine(b, 8, "Pending", onOff(g.ECCPending))
	qLine(b, 4, "GPU UUID", g.UUID)
	qLine(b, 4, "Minor Number", strconv.Itoa(g.Index))
	qHead(b, 4, "GPU Virtualization Mode")
	qLine(b, 8, "Virtualization Mode", "Host VGPU")
	qLine(b, 8, "Host VGPU Mode", "SR-IOV")
	qLine(b, 8, "vGPU Heterogeneous Mode", onOff(g.Heterogeneous))
	qHead(b, 4, "GPU Reset Status")
	qLine(b, 8, "Reset Required", yesNo(g.MIGCapable && g.MIGPending != g.MIGCurrent))
	qLine(b, 8, "Drain and Reset Recommended", "No")
	bus, dev, domain := splitBusID(g.BusID)
	qHead(b, 4, "PCI")
	qLine(b, 8, "Bus", "0x"+bus)
	qLine(b, 8, "Device", "0x"+dev)
	qLine(b, 8, "Domain", "0x"+domain)
	qLine(b, 8, "Device Id", fmt.Sprintf("0x%04X10DE", g.DeviceID))
	qLine(b, 8, "Bus Id", g.BusID)
	qHead(b, 4, "FB Memory Usage")
	qLine(b, 8, "Total", fmt.Sprintf("%d MiB", g.MemoryMiB))
	qLine(b, 8, "Used", "0 MiB")
	qLine(b, 8, "Free", fmt.Sprintf("%d MiB", g.MemoryMiB))
	qLine(b, 4, "Compute Mode", "Default")
	qHead(b, 4, "Fabric")
	state, status := "N/A", "N/A"
	if linksUp(g) > 0 {
		state, status = "Completed", "Success"
	}
	qLine(b, 8, "State", state)
	qLine(b, 8, "Status", status)
	qLine(b, 4, "Active vGPUs", strconv.Itoa(g.ActiveVGPUs))
	qLine(b, 4, "Processes", "None")
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// splitBusID turns 00000000:3B:00.0 into bus 3B, device 00, domain 0000.
func splitBusID(id string) (bus, dev, domain string) {
	parts := strings.Split(id, ":")
	if len(parts) != 3 {
		return "00", "00", "0000"
	}
	domain = parts[0]
	if len(domain) > 4 {
		domain = domain[len(domain)-4:]
	}
	return parts[1], strings.SplitN(parts[2], ".", 2)[0], domain
}

func linksUp(g GPU) int {
	n := 0
	for _, l := range g.NVLinks {
		if l.Up {
			n++
		}
	}
	return n
}

// queryField is one --query-gpu field: its value for a GPU of a host, and its unit (printed in the header and
// after the value, unless nounits).
type queryField struct {
	unit  string
	value func(h Host, g GPU) string
}

// queryFields are the --query-gpu fields the shell knows, by nvidia-smi's name.
var queryFields = map[string]queryField{
	"index":            {value: func(_ Host, g GPU) string { return strconv.Itoa(g.Index) }},
	"count":            {value: func(h Host, _ GPU) string { return strconv.Itoa(len(h.GPUs)) }},
	"name":             {value: func(_ Host, g GPU) string { return g.Name }},
	"uuid":             {value: func(_ Host, g GPU) string { return g.UUID }},
	"driver_version":   {value: func(h Host, _ GPU) string { return h.DriverVersion() }},
	"pci.bus_id":       {value: func(_ Host, g GPU) string { return g.BusID }},
	"memory.total":     {unit: "MiB", value: func(_ Host, g GPU) string { return strconv.Itoa(g.MemoryMiB) }},
	"mig.mode.current": {value: func(_ Host, g GPU) string { return csvMIG(g, g.MIGCurrent) }},
	"mig.mode.pending": {value: func(_ Host, g GPU) string { return csvMIG(g, g.MIGPending) }},
	"ecc.mode.current": {value: func(_ Host, g GPU) string { return onOff(g.ECCCurrent) }},
	"ecc.mode.pending": {value: func(_ Host, g GPU) string { return onOff(g.ECCPending) }},
}

// fieldAliases are other names nvidia-smi takes for a field.
var fieldAliases = map[string]string{
	"gpu_name":   "name",
	"gpu_uuid":   "uuid",
	"gpu_bus_id": "pci.bus_id",
	"pci.bus":    "pci.bus_id",
}

// CanonicalField returns the field name a --query-gpu entry stands for, or "" when unknown.
func CanonicalField(f string) string {
	if a, ok := fieldAliases[f]; ok {
		return a
	}
	if _, ok := queryFields[f]; ok {
		return f
	}
	return ""
}

// CSVOptions are the --format=csv flags.
type CSVOptions struct {
	NoHeader bool
	NoUnits  bool
}

// RenderQueryCSV is `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`; fields must be
// canonical (see CanonicalField).
func RenderQueryCSV(h Host, gpus []GPU, fields []string, opt CSVOptions) string {
	var b strings.Builder
	if !opt.NoHeader {
		head := make([]string, len(fields))
		for i, f := range fields {
			head[i] = f
			if u := queryFields[f].unit; u != "" && !opt.NoUnits {
				head[i] += " [" + u + "]"
			}
		}
		b.WriteString(strings.Join(head, ", ") + "\n")
	}
	for _, g := range gpus {
		row := make([]string, len(fields))
		for i, name := range fields {
			f := queryFields[name]
			row[i] = f.value(h, g)
			if f.unit != "" && !opt.NoUnits {
				row[i] += " " + f.unit
			}
		}
		b.WriteString(strings.Join(row, ", ") + "\n")
	}
	return b.String()
}

func csvMIG(g GPU, v bool) string {
	if !g.MIGCapable {
		return "[N/A]"
	}
	return onOff(v)
}

// RenderECCSet is the message of `nvidia-smi [-i N] -e 0|1` for one GPU (before "All done." and "Reboot required.").
func RenderECCSet(g GPU, enable bool) string {
	verb := "Disabled"
	if enable {
		verb = "Enabled"
	}
	return fmt.Sprintf("%s ECC support for GPU %s.\n", verb, g.BusID)
}

// RenderMIGSet is the message of `nvidia-smi -i N -mig 0|1` for one GPU (without the final "All done.").
func RenderMIGSet(g GPU, enable bool, change farm.Outcome) string {
	verb, state := "Disabled", "disable"
	if enable {
		verb, state = "Enabled", "enable"
	}
	switch change {
	case farm.PendingReboot:
		return fmt.Sprintf("Warning: MIG mode is in pending %s state for GPU %s:Not Supported\n"+
			"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU %s\n", state, g.BusID, g.BusID)
	case farm.PendingBusy:
		return fmt.Sprintf("Warning: MIG mode is in pending %s state for GPU %s:In use by another client\n"+
			"%s is currently being used by one or more other processes (e.g. CUDA application or a monitoring "+
			"application such as another instance of nvidia-smi). Please first kill all processes using the device "+
			"and retry the command or reboot the system to make MIG mode effective.\n", state, g.BusID, g.BusID)
	}
	return fmt.Sprintf("%s MIG Mode for GPU %s\n", verb, g.BusID)
}

const lgipRule = "+-----------------------------------------------------------------------------+\n"

// RenderLGIP is `nvidia-smi mig -lgip`: the GPU instance profiles of each MIG-enabled GPU.
func RenderLGIP(gpus []GPU) string {
	var b strings.Builder
	b.WriteString(lgipRule)
	b.WriteString("| GPU instance profiles:                                                      |\n")
	b.WriteString("| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |\n")
	b.WriteString("|                              Free/Total   GiB              CE    JPEG  OFA  |\n")
	b.WriteString("|=============================================================================|\n")
	for _, g := range gpus {
		for _, p := range g.MIGProfiles {
			fmt.Fprintf(&b, "|%4d  %-16s%4d%6d/%-9d%-11.2f%-7s%-7d%-6d%-4d|\n",
				g.Index, "MIG "+p.Name, p.ID, freeInstances(p, g.MIGInstances), p.Total, p.MemoryGiB, "No", p.SM, p.DEC, p.ENC)
			fmt.Fprintf(&b, "|%61s%-6d%-6d%-4d|\n", "", p.CE, p.JPEG, p.OFA)
			b.WriteString(lgipRule)
		}
	}
	return b.String()
}

const lgiRule = "+----------------------------------------------------+\n"

// RenderLGI is `nvidia-smi mig -lgi`: the GPU instances in use with their placements, per GPU in the order of
// the GPU instance profiles (-lgip), then by instance id (the MIG user guide's example, as captured in
// tests/fixtures/nvidia-smi/a100-40gb.mig-lgi.txt).
func RenderLGI(gpus []GPU) string {
	var b strings.Builder
	b.WriteString(lgiRule)
	b.WriteString("| GPU instances:                                     |\n")
	b.WriteString("| GPU   Name          Profile  Instance   Placement  |\n")
	b.WriteString("|                       ID       ID       Start:Size |\n")
	b.WriteString("|====================================================|\n")
	for _, g := range gpus {
		for _, p := range g.MIGProfiles {
			var rows []MIGInstance
			for _, in := range g.MIGInstances {
				if in.Profile == p.Name {
					rows = append(rows, in)
				}
			}
			slices.SortFunc(rows, func(a, b MIGInstance) int { return a.ID - b.ID })
			for _, in := range rows {
				fmt.Fprintf(&b, "|%4d  %-16s%3d%9d%13s     |\n", g.Index, "MIG "+in.Profile, p.ID, in.ID,
					fmt.Sprintf("%d:%d", in.Start, in.Size))
				b.WriteString(lgiRule)
			}
		}
	}
	return b.String()
}

// RenderLGIPP is `nvidia-smi mig -lgipp`: the possible placements of each profile.
func RenderLGIPP(gpus []GPU) string {
	var b strings.Builder
	for _, g := range gpus {
		for _, p := range g.MIGProfiles {
			starts := make([]string, len(p.Starts))
			for i, s := range p.Starts {
				starts[i] = strconv.Itoa(s)
			}
			label := "Placements:"
			if len(p.Starts) == 1 {
				label = "Placement :"
			}
			fmt.Fprintf(&b, "GPU %2d Profile ID %2d %s {%s}:%d\n", g.Index, p.ID, label, strings.Join(starts, ","), p.Size)
		}
	}
	return b.String()
}

// AllLinksInactive is what nvidia-smi prints under a GPU none of whose NVLinks is up (no bridge fitted, or NVLink
// off), instead of its link lines (tests/fixtures/nvidia-smi/rtx-a6000.nvlink-s-inactive.txt).
const AllLinksInactive = "NVML: Unable to retrieve NVLink information as all links are inActive"

// RenderNVLinkStatus is `nvidia-smi nvlink -s`.
func RenderNVLinkStatus(gpus []GPU) string {
	var b strings.Builder
	for _, g := range gpus {
		fmt.Fprintf(&b, "GPU %d: %s (UUID: %s)\n", g.Index, g.Name, g.UUID)
		if len(g.NVLinks) > 0 && linksUp(g) == 0 {
			b.WriteString(AllLinksInactive + "\n")
			continue
		}
		for _, l := range g.NVLinks {
			if l.Up {
				fmt.Fprintf(&b, "\t Link %d: %s GB/s\n", l.Index, strconv.FormatFloat(l.SpeedGBs, 'f', -1, 64))
			} else {
				fmt.Fprintf(&b, "\t Link %d: <inactive>\n", l.Index)
			}
		}
	}
	return b.String()
}

// topoCell is the relation of two GPUs in `nvidia-smi topo -m`.
func topoCell(a, b GPU) string {
	if a.Index == b.Index {
		return " X "
	}
	n := 0
	for _, l := range a.NVLinks {
		if l.Up && l.Peer == b.Index {
			n++
		}
	}
	if n == 0 && slices.Contains(a.SwitchPeers, b.Index) {
		for _, l := range a.NVLinks {
			if l.Up && l.Peer < 0 {
				n++
			}
		}
	}
	if n > 0 {
		return fmt.Sprintf("NV%d", n)
	}
	if a.NUMANode == b.NUMANode {
		return "NODE"
	}
	return "SYS"
}

const topoLegend = `
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// RenderTopo is `nvidia-smi topo -m` over all GPUs of a host.
func RenderTopo(gpus []GPU) string {
	var b strings.Builder
	b.WriteString("\t")
	for _, g := range gpus {
		fmt.Fprintf(&b, "GPU%d\t", g.Index)
	}
	b.WriteString("CPU Affinity\tNUMA Affinity\tGPU NUMA ID\n")
	for _, a := range gpus {
		fmt.Fprintf(&b, "GPU%d\t", a.Index)
		for _, c := range gpus {
			b.WriteString(topoCell(a, c) + "\t")
		}
		fmt.Fprintf(&b, "N/A\t%d\t\tN/A\n", a.NUMANode)
	}
	b.WriteString(topoLegend)
	return b.String()
}

// ModuleParam is one row of `esxcli system module parameters list`.
type ModuleParam struct {
	Name, Type, Value, Description string
}

// RenderEsxcliTable renders rows the way esxcli's table formatter does: columns two spaces apart, a
// dashed rule under each header as wide as the column.
func RenderEsxcliTable(headers []string, rows [][]string) string {
	width := make([]int, len(headers))
	for i, h := range headers {
		width[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if len(c) > width[i] {
				width[i] = len(c)
			}
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		for i, c := range cells {
			if i == len(cells)-1 {
				b.WriteString(c)
				break
			}
			fmt.Fprintf(&b, "%-*s  ", width[i], c)
		}
		return strings.TrimRight(b.String(), " ") + "\n"
	}
	rule := make([]string, len(headers))
	for i := range headers {
		rule[i] = strings.Repeat("-", width[i])
	}
	out := line(headers) + line(rule)
	for _, r := range rows {
		out += line(r)
	}
	return out
}

// RenderModuleParams is `esxcli system module parameters list -m MODULE`.
func RenderModuleParams(params []ModuleParam) string {
	rows := make([][]string, len(params))
	for i, p := range params {
		rows[i] = []string{p.Name, p.Type, p.Value, p.Description}
	}
	return RenderEsxcliTable([]string{"Name", "Type", "Value", "Description"}, rows)
}
