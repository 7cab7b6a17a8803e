package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idgen/idgen/rpc/idcheck"
)

// verifyExitViolation is idctl verify's exit code for a duplicate, a
// containment violation or a malformed batch.
const verifyExitViolation = 3

// verifier is a running `idctl verify`.
type verifier struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	errb   bytes.Buffer
	done   chan struct{}
	err    error
	budget time.Duration
}

// startVerify starts idctl verify against c's nodes for d at rate IDs/s.
func startVerify(c *cluster, d time.Duration, rate int) (*verifier, error) {
	idctl, target := c.bin.Idctl, c.grpcTargets()
	v := &verifier{done: make(chan struct{}), budget: d}
	// About 25 calls a second whatever the rate: a realistic client batches,
	// and four calls in flight keep up with it on two cores. Every eighth
	// call asks for count 0, the node's default batch, which it serves from
	// its prefetch buffer (batches minted before a fault): the Pool's path.
	batch := min(max(rate/25, 100), 1000)
	counts := strings.Repeat(strconv.Itoa(batch)+",", 7) + "0"
	v.cmd = exec.Command(idctl, "verify", "--target", target,
		"--duration", d.String(), "--rate", strconv.Itoa(rate), "--batch", counts, "--json")
	v.cmd.Env = append(os.Environ(), c.env...)
	v.cmd.Stdout, v.cmd.Stderr = &v.out, &v.errb
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start idctl verify: %w", err)
	}
	go func() {
		v.err = v.cmd.Wait()
		close(v.done)
	}()
	return v, nil
}

// wait waits for verify to finish (its duration plus grace), parses its
// report and returns its exit code. A verify that outlives the grace is killed.
func (v *verifier) wait(grace time.Duration) (idcheck.Report, int, error) {
	var rep idcheck.Report
	select {
	case <-v.done:
	case <-time.After(grace):
		_ = v.cmd.Process.Kill()
		<-v.done
		return rep, -1, fmt.Errorf("idctl verify still running %v after its duration; killed. stderr:\n%s", grace, tail(v.errb.String(), 2000))
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(v.err, &ee) {
		code = ee.ExitCode()
	} else if v.err != nil {
		return rep, -1, v.err
	}
	if err := json.Unmarshal(bytes.TrimSpace(v.out.Bytes()), &rep); err != nil {
		return rep, code, fmt.Errorf("idctl verify (exit %d) printed no JSON report: %v\nstdout:\n%s\nstderr:\n%s",
			code, err, tail(v.out.String(), 2000), tail(v.errb.String(), 2000))
	}
	return rep, code, nil
}

// stop kills a verify that is still running (cleanup).
func (v *verifier) stop() {
	select {
	case <-v.done:
	default:
		_ = v.cmd.Process.Kill()
		<-v.done
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// summary is the one line every chaos run ends with.
func summary(prefix string, faults int, r idcheck.Report) string {
	return fmt.Sprintf("%s: faults=%d acknowledged=%d duplicates=%d containment_violations=%d owner_violations=%d bad_batches=%d success_rate=%.4f worst_stall=%.1fs",
		prefix, faults, r.Acknowledged, r.Duplicates, r.ContainmentViolations, r.OwnerViolations, r.BadBatches, r.SuccessRate, float64(r.LargestGapMS)/1000)
}

func envDuration(key string, def time.Duration) (time.Duration, error) {
	s := os.Getenv(key)
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 2m or 30m", key, s)
	}
	return d, nil
}

func envInt(key string, def int64) (int64, error) {
	s := os.Getenv(key)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want an integer", key, s)
	}
	return n, nil
}
