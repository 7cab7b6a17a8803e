// Package k8s tests the Kubernetes manifests beside it. No cluster can be
// started here, so the test is strict instead: every document is decoded
// with the Kubernetes API types in strict mode (an unknown or repeated
// field fails), the objects are checked against each other, and the real
// idgend runs each container's arguments and environment through --check,
// so a misspelled flag fails too.
package k8s

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// binDir holds idgend and idctl, built once from the main module.
var binDir string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "idgen-k8s-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-C", "../..", "-o", dir+string(os.PathSeparator), "./cmd/idgend", "./cmd/idctl")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building idgend and idctl:", err)
			return 1
		}
		binDir = dir
		return m.Run()
	}()
	os.Exit(code)
}

// manifests are the decoded objects of one directory.
type manifests struct {
	sets     []*appsv1.StatefulSet
	services []*corev1.Service
	pdbs     []*policyv1.PodDisruptionBudget
	files    []string // every *.yaml but kustomization.yaml
}

// kustomization is the part of kustomization.yaml used here, decoded
// strictly so a misspelled key fails as in kubectl.
type kustomization struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	Labels     []map[string]any    `json:"labels"`
	Resources  []string            `json:"resources"`
	Images     []map[string]string `json:"images,omitempty"`
}

var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// load decodes every manifest in dir; files maps a file name to its content
// in place of the one on disk (for the tests of mistakes).
func load(dir string, files map[string][]byte) (*manifests, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	m := &manifests{}
	var kust kustomization
	for _, path := range names {
		name := filepath.Base(path)
		b, ok := files[name]
		if !ok {
			if b, err = os.ReadFile(path); err != nil {
				return nil, err
			}
		}
		if name == "kustomization.yaml" {
			if err := yaml.UnmarshalStrict(b, &kust); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			continue
		}
		m.files = append(m.files, name)
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s document %d: %w", name, i, err)
			}
			switch o := obj.(type) {
			case *appsv1.StatefulSet:
				m.sets = append(m.sets, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			default:
				return nil, fmt.Errorf("%s document %d: unexpected %T", name, i, obj)
			}
		}
	}
	if kust.Kind != "Kustomization" {
		return nil, errors.New("kustomization.yaml: missing or not a Kustomization")
	}
	if !slices.Equal(slices.Sorted(slices.Values(kust.Resources)), m.files) {
		return nil, fmt.Errorf("kustomization.yaml lists %v, the directory holds %v", kust.Resources, m.files)
	}
	return m, nil
}

// check holds the objects to what idgen needs of them.
// checkMemLimit: the container tells the Go runtime its memory limit
// (GOMEMLIMIT), at most 90% of the container's, so the heap is collected
// before the kernel kills the pod.
func checkMemLimit(c corev1.Container) error {
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return errors.New("the container needs a memory limit")
	}
	var soft string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			soft = e.Value
		}
	}
	if soft == "" {
		return errors.New("the container must set GOMEMLIMIT, the memory limit the Go runtime knows")
	}
	units := map[string]int64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
	num := strings.TrimRight(soft, "BKMGTi")
	n, err := strconv.ParseInt(num, 10, 64)
	mult, known := units[strings.TrimPrefix(soft, num)]
	if strings.TrimPrefix(soft, num) == "" {
		mult, known = 1, true
	}
	if err != nil || !known {
		return fmt.Errorf("GOMEMLIMIT %q is not a byte count (460MiB)", soft)
	}
	if bytes := n * mult; bytes > limit.Value()*9/10 {
		return fmt.Errorf("GOMEMLIMIT %s is over 90%% of the container's memory limit %s", soft, limit.String())
	}
	return nil
}

func (m *manifests) check() error {
	if len(m.sets) != 1 || len(m.pdbs) != 1 {
		return fmt.Errorf("want one StatefulSet and one PodDisruptionBudget, have %d and %d", len(m.sets), len(m.pdbs))
	}
	ss := m.sets[0]
	spec := ss.Spec
	if spec.Replicas == nil || *spec.Replicas != 3 {
		return fmt.Errorf("replicas %s, want 3 by default", orUnset(spec.Replicas))
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		return errors.New("podManagementPolicy must be Parallel: the first nodes bootstrap together")
	}
	labels := spec.Template.Labels
	for k, v := range spec.Selector.MatchLabels {
		if labels[k] != v {
			return fmt.Errorf("the selector %s=%s does not match the pod labels %v", k, v, labels)
		}
	}
	var headless *corev1.Service
	for _, s := range m.services {
		for k, v := range s.Spec.Selector {
			if labels[k] != v {
				return fmt.Errorf("service %s selects %s=%s, not the pods %v", s.Name, k, v, labels)
			}
		}
		if s.Name == spec.ServiceName {
			headless = s
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		return fmt.Errorf("serviceName %q must be a headless Service publishing not-ready pods", spec.ServiceName)
	}
	pdb := m.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		return errors.New("the PodDisruptionBudget must allow at most one pod down")
	}
	pod := spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		return errors.New("the pod must run as a non-root user")
	}
	if len(spec.VolumeClaimTemplates) != 1 {
		return errors.New("the data dir must be a volumeClaimTemplate")
	}
	if len(pod.Containers) != 1 {
		return fmt.Errorf("want one container, have %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		return errors.New("the container must have a read-only root and no privilege escalation")
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			return fmt.Errorf("want an HTTP probe on %s", p.path)
		}
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.probe.HTTPGet.Port.String() }) {
			return fmt.Errorf("probe %s uses port %q, which the container does not name", p.path, p.probe.HTTPGet.Port.String())
		}
	}
	if err := checkMemLimit(c); err != nil {
		return err
	}
	args := expand(c)
	timeout := 5 * time.Second // idgend's default
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--shutdown-timeout="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("--shutdown-timeout: %w", err)
			}
			timeout = d
		}
		if v, ok := strings.CutPrefix(a, "--join="); ok {
			for _, j := range strings.Split(v, ",") {
				if !strings.Contains(j, "."+spec.ServiceName+".") || !strings.HasPrefix(j, ss.Name+"-") {
					return fmt.Errorf("--join %s is not a pod of %s through %s", j, ss.Name, spec.ServiceName)
				}
			}
		}
	}
	grace := pod.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= timeout {
		return fmt.Errorf("terminationGracePeriodSeconds %s must exceed --shutdown-timeout %s", orUnset(grace), timeout)
	}
	return nil
}

// orUnset prints an optional number.
func orUnset[T int32 | int64](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// fakePod is what the downward API would give the first pod.
var fakePod = map[string]string{"metadata.name": "idgen-0", "metadata.namespace": "default", "status.podIP": "10.0.0.7"}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv resolves c's environment as the kubelet would for fakePod.
func containerEnv(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v = fakePod[e.ValueFrom.FieldRef.FieldPath]
		}
		env[e.Name] = varRef.ReplaceAllStringFunc(v, func(ref string) string {
			if x, ok := env[ref[2:len(ref)-1]]; ok {
				return x
			}
			return ref
		})
	}
	return env
}

// expand returns c's arguments with $(VAR) references replaced, as the
// kubelet does (an unknown reference stays as written).
func expand(c corev1.Container) []string {
	env := containerEnv(c)
	var out []string
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		out = append(out, varRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		}))
	}
	return out
}

// runCheck runs idgend --check with the container's arguments and
// environment. Secret volumes are made in a temporary directory with the
// files the README's commands put in them, and their mount paths point there.
func runCheck(t *testing.T, pod corev1.PodSpec, c corev1.Container) (string, error) {
	t.Helper()
	root := t.TempDir()
	pki := filepath.Join(root, "pki")
	for _, args := range [][]string{
		{"tls", "ca", "create", "--dir", pki},
		{"tls", "cert", "create", "--dir", pki, "--role", "server", "--name", "server", "--dns", "idgen,idgen.default.svc"},
		{"keygen", "--out", filepath.Join(pki, "gossip.key")},
	} {
		if out, err := exec.Command(filepath.Join(binDir, "idctl"), args...).CombinedOutput(); err != nil {
			t.Fatalf("idctl %v: %v\n%s", args, err, out)
		}
	}
	secrets := map[string][]string{"idgen-tls": {"ca.pem", "server.pem", "server-key.pem"}, "idgen-gossip": {"gossip.key"}}
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		dir := filepath.Join(root, "mnt", vm.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		mounts[vm.MountPath] = dir
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			files, ok := secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("volume %s uses secret %q, which the README does not create", v.Name, v.Secret.SecretName)
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(pki, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o400); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Each value is a path (or a comma list of them) under at most one mount.
	relocate := func(s string) string {
		parts := strings.Split(s, ",")
		for i, p := range parts {
			for mp, dir := range mounts {
				if rest, ok := strings.CutPrefix(p, mp); ok && (rest == "" || rest[0] == '/') {
					parts[i] = dir + rest
					break
				}
			}
		}
		return strings.Join(parts, ",")
	}
	args := expand(c)
	for i, a := range args {
		if name, v, ok := strings.Cut(a, "="); ok {
			args[i] = name + "=" + relocate(v)
		}
	}
	if len(c.Command) > 0 {
		args = args[len(c.Command):] // the image's entrypoint is idgend
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "idgend"), append([]string{"--check"}, args...)...)
	// Only the container's environment: an IDGEN_* of the test's own must
	// not stand in for a missing one.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root}
	for k, v := range containerEnv(c) {
		cmd.Env = append(cmd.Env, k+"="+relocate(v))
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestManifests(t *testing.T) {
	m, err := load(".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.check(); err != nil {
		t.Fatal(err)
	}
	pod := m.sets[0].Spec.Template.Spec
	for _, c := range pod.Containers {
		out, err := runCheck(t, pod, c)
		if err != nil {
			t.Fatalf("idgend --check with container %s's arguments: %v\n%s", c.Name, err, out)
		}
		if !strings.Contains(out, "configuration ok") || !strings.Contains(out, "--advertise=10.0.0.7\t(set)") ||
			!strings.Contains(out, "--log-format=json\t(set)") {
			t.Fatalf("idgend --check did not resolve the pod's settings:\n%s", out)
		}
	}
}

// The test must catch the mistakes it exists for: a misspelled field, a
// misspelled flag, a value idgend refuses and objects that do not fit.
func TestManifestMistakesAreCaught(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ss, svc := read("statefulset.yaml"), read("services.yaml")
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"misspelled field", "statefulset.yaml", "readinessProbe:", "readinesProbe:", `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"repeated field", "statefulset.yaml", "  serviceName: idgen-peers\n", "  serviceName: idgen-peers\n  serviceName: idgen-peers\n", `key "serviceName" already set`},
		{"plaintext without TLS", "statefulset.yaml", "            - --tls-cert=/etc/idgen/tls/server.pem\n", "", "--tls-cert"},
		{"grace shorter than shutdown", "statefulset.yaml", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 20", "must exceed --shutdown-timeout"},
		{"another default size", "statefulset.yaml", "replicas: 3", "replicas: 10", "want 3 by default"},
		{"not headless", "services.yaml", "  clusterIP: None\n", "", "headless"},
		{"no memory limit the runtime knows", "statefulset.yaml", "            - name: GOMEMLIMIT\n              value: 460MiB\n", "", "GOMEMLIMIT"},
		{"runtime limit at the container's", "statefulset.yaml", "value: 460MiB", "value: 512MiB", "over 90%"},
		{"probe on a port not named", "statefulset.yaml", "path: /readyz\n              port: http", "path: /readyz\n              port: admin", `port "admin"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{"statefulset.yaml": []byte(ss), "services.yaml": []byte(svc)}
			src := string(files[tc.file])
			if !strings.Contains(src, tc.old) {
				t.Fatalf("%s no longer holds %q", tc.file, tc.old)
			}
			files[tc.file] = []byte(strings.Replace(src, tc.old, tc.new, 1))
			m, err := load(".", files)
			if err == nil {
				err = m.check()
			}
			if err == nil {
				pod := m.sets[0].Spec.Template.Spec
				var out string
				out, err = runCheck(t, pod, pod.Containers[0])
				if err != nil {
					err = fmt.Errorf("%w: %s", err, out)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			t.Logf("caught: %v", err)
		})
	}
}

// A misspelled idgend flag in the arguments fails idgend --check.
func TestMisspelledFlagFailsCheck(t *testing.T) {
	m, err := load(".", nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := m.sets[0].Spec.Template.Spec
	c := *pod.Containers[0].DeepCopy()
	for i, a := range c.Args {
		c.Args[i] = strings.Replace(a, "--grpc-addr=", "--grpc-adress=", 1)
	}
	out, err := runCheck(t, pod, c)
	if err == nil || !strings.Contains(out, "flag provided but not defined: -grpc-adress") {
		t.Fatalf("idgend --check accepted --grpc-adress: %v\n%s", err, out)
	}
	t.Logf("caught: %v: %s", err, strings.SplitN(out, "\n", 2)[0])
}
