package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestGuestFlagsGoTogetherOnAPreparedFolder(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-guests", dir}, "go together"},
		{[]string{"-guest-hook", "/bin/true"}, "go together"},
		{[]string{"-guests", dir, "-guest-hook", "/bin/true"}, "not a prepared folder"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb, make(chan os.Signal)); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// gpusim with guests prints their variables, and removes every guest when it stops.
func TestGuestsAreAttachedAndGoWhenGpusimStops(t *testing.T) {
	dir := t.TempDir()
	guests := filepath.Join(dir, "guests")
	if err := os.MkdirAll(guests, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(guests, "network"), []byte("prefix=t\nnet=10.9.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	hook := filepath.Join(dir, "hook.sh")
	body := "#!/bin/sh\necho \"$1 ${VGPUCTL_GUEST_PASSWORD:+with-password}\" >> " + calls + "\n" +
		"[ \"$1\" != start ] || echo \"guest$3 10.9.0.$((10 + $3))\"\n"
	if err := os.WriteFile(hook, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "env")
	stop := make(chan os.Signal, 1)
	done := make(chan int)
	var out, errb bytes.Buffer
	args := []string{"-env-file", envFile, "-no-ssh", "-hosts", "1", "-guests", guests, "-guest-hook", hook}
	go func() { done <- run(args, &out, &errb, stop) }()
	var line string
	for i := 0; i < 500 && line == ""; i++ {
		data, _ := os.ReadFile(envFile)
		line = string(data)
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"GPUSIM_GUEST_PASSWORD=", "GPUSIM_GUEST_KEY_FILE=" + filepath.Join(guests, "id_ed25519"),
		"GPUSIM_GUEST_KNOWN_HOSTS=" + filepath.Join(guests, "known_hosts")} {
		if !strings.Contains(line, want) {
			t.Fatalf("env line %q lacks %s (stderr %q)", line, want, errb.String())
		}
	}
	stop <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	data, _ := os.ReadFile(calls)
	if string(data) != "down with-password\n" {
		t.Fatalf("hook runs %q, want the guests removed once", data)
	}
}
