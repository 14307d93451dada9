package guests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Script is a Hook that runs a program with guestctl.sh's commands on a prepared folder:
//
//	PATH start DIR INDEX HOSTNAME   prints "NAME ADDRESS" once the guest's SSH server answers
//	PATH stop DIR INDEX
//	PATH remove DIR INDEX
//	PATH down DIR
//
// Env is added to gpusim's own environment for each run; a run that takes longer than Timeout is killed.
type Script struct {
	Path    string
	Dir     string
	Env     []string
	Timeout time.Duration
}

func (s *Script) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Path, args...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.WaitDelay = 5 * time.Second // a child left holding the pipes does not hold gpusim
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", s.Path, args[0], err, lastLines(stderr.String(), 5))
	}
	return stdout.String(), nil
}

// Start runs `start` and returns the address it printed.
func (s *Script) Start(ctx context.Context, index int, hostname string) (string, error) {
	out, err := s.run(ctx, "start", s.Dir, strconv.Itoa(index), hostname)
	if err != nil {
		return "", err
	}
	fields := strings.Fields(lastLines(out, 1))
	if len(fields) == 0 || net.ParseIP(fields[len(fields)-1]) == nil {
		return "", fmt.Errorf("%s start printed no address: %q", s.Path, out)
	}
	return fields[len(fields)-1], nil
}

// Stop runs `stop`.
func (s *Script) Stop(ctx context.Context, index int) error {
	_, err := s.run(ctx, "stop", s.Dir, strconv.Itoa(index))
	return err
}

// Remove runs `remove`.
func (s *Script) Remove(ctx context.Context, index int) error {
	_, err := s.run(ctx, "remove", s.Dir, strconv.Itoa(index))
	return err
}

// Down runs `down`.
func (s *Script) Down(ctx context.Context) error {
	_, err := s.run(ctx, "down", s.Dir)
	return err
}

func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
