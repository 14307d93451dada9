package farm

import (
	"fmt"
	"strconv"
	"strings"
)

// RmPVMRL field layout (NVIDIA AI Enterprise 5.0 user guide, 7.3 "RmPVMRL Registry Key"; docs/scheduler.md).
const (
	pvmrlWithoutStrictRR = 0x02
	pvmrlEqualShare      = 0x01
	pvmrlFixedShare      = 0x11
	pvmrlMaxTimesliceMs  = 30
	pvmrlMinFrequencyHz  = 63
	pvmrlMaxFrequencyHz  = 960
	pvmrlMaxAveraging    = 60
	// NV_REG_STR_RM_PVMRL_FREQUENCY is bits 21:12 in the driver's nvrm_registry.h (10 bits; TIMESLICE is
	// 23:16, AVERAGE_FACTOR 31:24)
	pvmrlFrequencyMask = 0x3ff
)

// DecodeRmPVMRL reads an RmPVMRL value the way vgpuctl does (shared vectors in
// tests/fixtures/scheduler/rmpvmrl.yaml): an unset or zero value is best effort, anything the layout does
// not explain is policy "unknown".
func DecodeRmPVMRL(value string) Scheduler {
	s := Scheduler{Policy: "best-effort", Mode: "none", RmPVMRL: value}
	n, ok := parseRmPVMRL(value)
	if ok && n == 0 {
		return s
	}
	unknown := Scheduler{Policy: "unknown", Mode: "none", RmPVMRL: value}
	policy := map[uint64]string{pvmrlEqualShare: "equal-share", pvmrlFixedShare: "fixed-share"}[n&0xff&^pvmrlWithoutStrictRR]
	if !ok || policy == "" {
		return unknown
	}
	s.Policy = policy
	if n&pvmrlWithoutStrictRR != 0 {
		if n&0xff00ff00 != 0 {
			return unknown
		}
		s.Mode = "timeslice"
		s.TimesliceMs = min(int(n>>16&0xff), pvmrlMaxTimesliceMs)
		return s
	}
	if n&0x00c00f00 != 0 { // bits 11:8 are no field; bits 23:22 lie outside the driver's frequency field
		return unknown
	}
	s.Mode = "strict"
	if fff := int(n >> 12 & pvmrlFrequencyMask); fff != 0 {
		s.FrequencyHz = min(max(fff, pvmrlMinFrequencyHz), pvmrlMaxFrequencyHz)
	}
	s.AveragingFactor = min(int(n>>24&0xff), pvmrlMaxAveraging)
	return s
}

// parseRmPVMRL returns the value as a number; an empty value is 0; ok is false when it is not a number.
func parseRmPVMRL(value string) (uint64, bool) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 0, 32)
	return n, err == nil
}

// Label is how vgpuctl prints a scheduler: "equal-share", "fixed-share (24 ms)", "RmPVMRL=0x21".
func (s Scheduler) Label() string {
	if s.Policy == "unknown" {
		return "RmPVMRL=" + s.RmPVMRL
	}
	var details []string
	if s.TimesliceMs > 0 {
		details = append(details, fmt.Sprintf("%d ms", s.TimesliceMs))
	}
	if s.FrequencyHz > 0 {
		details = append(details, fmt.Sprintf("%d Hz", s.FrequencyHz))
	}
	if s.AveragingFactor > 0 {
		details = append(details, fmt.Sprintf("averaging %d", s.AveragingFactor))
	}
	if len(details) == 0 {
		return s.Policy
	}
	return s.Policy + " (" + strings.Join(details, ", ") + ")"
}
