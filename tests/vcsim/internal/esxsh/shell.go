package esxsh

import (
	"errors"
	"path"
	"strings"
	"time"
)

// Result is what one command produced.
type Result struct {
	Stdout string
	Stderr string
	Exit   int
}

// Shell runs one ESXi shell command line against a Backend. It understands one simple command (no
// pipes, redirections or lists): vgpuctl sends exactly that.
type Shell struct {
	Backend Backend
	Now     func() time.Time // clock for `nvidia-smi -q`; time.Now when nil
}

func (s *Shell) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Run executes cmdline on host.
func (s *Shell) Run(host, cmdline string) Result {
	args, err := SplitCommandLine(cmdline)
	if err != nil {
		return Result{Stderr: "sh: syntax error: " + err.Error() + "\n", Exit: 2}
	}
	if len(args) == 0 {
		return Result{}
	}
	info, err := s.Backend.Host(host)
	if err != nil {
		return Result{Stderr: err.Error() + "\n", Exit: 1}
	}
	h := View(info)
	switch path.Base(args[0]) {
	case "nvidia-smi":
		if h.DriverVersion() == "" { // no vGPU Manager installed: no NVIDIA tools either
			return Result{Stderr: "sh: nvidia-smi: not found\n", Exit: 127}
		}
		return s.nvidiaSMI(h, args[1:])
	case "esxcli":
		return s.esxcli(h, args[1:])
	case "hostname":
		return Result{Stdout: h.Name + "\n"}
	case "true":
		return Result{}
	case "echo":
		return Result{Stdout: strings.Join(args[1:], " ") + "\n"}
	}
	return Result{Stderr: "sh: " + args[0] + ": not found\n", Exit: 127}
}

var errUnterminated = errors.New("unterminated quoted string")

// SplitCommandLine splits a command line like a POSIX shell does for one simple command: whitespace
// separates words, single quotes are literal, double quotes and backslashes escape.
func SplitCommandLine(s string) ([]string, error) {
	var (
		args    []string
		cur     strings.Builder
		inWord  bool
		quote   rune
		escaped bool
	)
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '\\':
				escaped = true
			default:
				cur.WriteRune(r)
			}
		case r == '\\':
			escaped, inWord = true, true
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, errUnterminated
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args, nil
}
