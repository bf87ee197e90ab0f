package harness

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MemStatus is the resident set of a process, from /proc/<pid>/status.
type MemStatus struct {
	VmRSS, RssAnon, RssFile float64 // MiB
	// VmHWM is the peak of VmRSS since the process started.
	VmHWM float64 // MiB
}

// ReadMem reads VmRSS, RssAnon, RssFile and VmHWM of pid.
func ReadMem(pid int) (MemStatus, error) {
	var m MemStatus
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	found := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		key, val, ok := strings.Cut(string(line), ":")
		if !ok {
			continue
		}
		var dst *float64
		switch key {
		case "VmRSS":
			dst = &m.VmRSS
		case "RssAnon":
			dst = &m.RssAnon
		case "RssFile":
			dst = &m.RssFile
		case "VmHWM":
			dst = &m.VmHWM
		default:
			continue
		}
		f := strings.Fields(val) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("unexpected %s line %q", key, line)
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return m, err
		}
		*dst = kb / 1024
		found++
	}
	if found != 4 {
		return m, fmt.Errorf("/proc/%d/status lacks VmRSS, RssAnon, RssFile or VmHWM", pid)
	}
	return m, nil
}

// LoadAvg is the content of /proc/loadavg: the 1, 5 and 15 minute load.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Load1 is the 1-minute load average, or -1.
func Load1() float64 {
	f := strings.Fields(LoadAvg())
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
