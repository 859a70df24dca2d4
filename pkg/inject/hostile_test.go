package inject

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// hostileValues try to smuggle fields in through text: YAML and JSON
// fragments, quotes, newlines and template syntax.
var hostileValues = []string{
	"1\nsecurityContext:\n  privileged: true",
	"100m\"\nprivileged: true\n",
	`{"securityContext":{"privileged":true}}`,
	"\"}]},{\"name\":\"evil\",\"image\":\"evil\"}",
	"true\n- name: evil\n  image: evil",
	"{{ .Values }}",
	"' \" \\ \x00 \t",
	"*\n-o\n22",
	"10.0.0.0/8\n- --run-validation",
	"warning --proxyAdminPort=0",
	"istiod.evil:15012\nrunAsUser: 0",
	"sidecar\ncontainers:\n- name: evil",
	"interceptionMode: TPROXY",
	"proxyMetadata:\n  CA_ADDR: evil.example.com:15012",
	"proxyMetadata:\n  'BAD NAME': x",
}

var honoured = []string{
	AnnotationProxyImage, AnnotationProxyCPU, AnnotationProxyMemory, AnnotationProxyCPULimit,
	AnnotationProxyMemLimit, AnnotationLogLevel, AnnotationIncludeOutCIDRs, AnnotationExcludeOutCIDRs,
	AnnotationIncludeInPorts, AnnotationExcludeInPorts, AnnotationExcludeOutPorts, AnnotationProxyConfig,
	AnnotationRewriteProbers, AnnotationTemplates, AnnotationNativeSidecar,
}

// assertShape checks what no input may change: one istio-proxy with the
// restricted security context, istio-init's exact privileges, and exactly
// the expected containers.
func assertShape(t *testing.T, pod *corev1.Pod, apps []string) {
	t.Helper()
	if n := countProxies(pod); n != 1 {
		t.Fatalf("%d istio-proxy containers, want 1", n)
	}
	if got, want := proxyOf(pod).SecurityContext, restrictedContext(); !reflect.DeepEqual(got, want) {
		t.Errorf("istio-proxy security context = %+v, want %+v", got, want)
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		if c.Name == ProxyContainerName {
			continue
		}
		names = append(names, c.Name)
		if c.SecurityContext != nil {
			t.Errorf("app container %q gained a security context", c.Name)
		}
	}
	if !reflect.DeepEqual(names, apps) {
		t.Errorf("app containers = %q, want %q", names, apps)
	}
	if c := findContainer(pod.Spec.InitContainers, ProxyContainerName); c != nil &&
		(c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		t.Error("native istio-proxy without restartPolicy Always")
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name != ProxyContainerName && c.Name != InitContainerName {
			t.Errorf("unexpected init container %q", c.Name)
		}
	}
	if init := findContainer(pod.Spec.InitContainers, InitContainerName); init != nil {
		sc := init.SecurityContext
		if *sc.Privileged || *sc.AllowPrivilegeEscalation ||
			!reflect.DeepEqual(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
			t.Errorf("istio-init security context changed: %+v", sc)
		}
	}
}

func TestHostileAnnotationValuesAreRefused(t *testing.T) {
	p := defaultParams(t)
	for _, anno := range honoured {
		for _, val := range hostileValues {
			t.Run(anno+"="+val, func(t *testing.T) {
				pod := appPod(map[string]string{anno: val}, nil)
				mutated, _, err := Mutate(pod, p)
				var ae *AnnotationError
				if err != nil {
					if !errors.As(err, &ae) || ae.Annotation != anno {
						t.Fatalf("error %v does not name %s", err, anno)
					}
					if !strings.Contains(err.Error(), anno) {
						t.Fatalf("message %q does not name %s", err.Error(), anno)
					}
					return
				}
				// Accepted only if harmless: the shape is intact.
				assertShape(t, mutated, []string{"app", "metrics"})
			})
		}
	}
}

// Annotations outside the allow-list are ignored: the injected pod is the
// baseline plus the annotation itself, whatever it says.
func TestUnhonouredAnnotationsChangeNothing(t *testing.T) {
	p := defaultParams(t)
	base, _, err := Mutate(appPod(nil, nil), p)
	if err != nil {
		t.Fatal(err)
	}
	ignored := []string{
		"sidecar.istio.io/interceptionMode", "sidecar.istio.io/capNetBindService",
		"sidecar.istio.io/enableCoreDump", "sidecar.istio.io/userVolume",
		"sidecar.istio.io/userVolumeMount", "sidecar.istio.io/bootstrapOverride",
		"sidecar.istio.io/agentLogLevel", "status.sidecar.istio.io/port",
		"sidecar.istio.io/componentLogLevel", "sidecar.istio.io/proxyImageType",
		"traffic.sidecar.istio.io/kubevirtInterfaces", "example.com/x~y/z",
	}
	for _, anno := range ignored {
		for _, val := range append(hostileValues, "TPROXY", "true", `{"evil":{"hostPath":{"path":"/"}}}`) {
			t.Run(anno+"="+val, func(t *testing.T) {
				got, _, err := Mutate(appPod(map[string]string{anno: val}, nil), p)
				if err != nil {
					t.Fatalf("an ignored annotation caused %v", err)
				}
				delete(got.Annotations, anno)
				a, _ := json.Marshal(base)
				b, _ := json.Marshal(got)
				if string(a) != string(b) {
					t.Errorf("ignored annotation changed the pod:\n%s\n%s", a, b)
				}
			})
		}
	}
}

// Labels and container names flow into labels, env values and probe paths
// as plain strings; they never add containers or change privileges.
func TestHostileLabelsAndNamesStayData(t *testing.T) {
	p := defaultParams(t)
	for _, val := range hostileValues {
		t.Run(val, func(t *testing.T) {
			pod := appPod(nil, map[string]string{"app": val, "version": val, LabelInject: val})
			pod.Labels[LabelInject] = "true"
			pod.Spec.Containers[1].Name = val
			pod.Spec.Containers[1].ReadinessProbe = &corev1.Probe{ProbeHandler: httpProbe("/x", 8080)}
			mutated, _, err := Mutate(pod, p)
			if err != nil {
				t.Fatal(err)
			}
			assertShape(t, mutated, []string{"app", val})
			if got := mutated.Labels[LabelCanonicalName]; len(got) > 63 {
				t.Errorf("canonical name longer than 63: %q", got)
			}
			apps, _ := envValue(proxyOf(mutated), "ISTIO_META_APP_CONTAINERS")
			if apps != "app,"+val {
				t.Errorf("ISTIO_META_APP_CONTAINERS = %q", apps)
			}
		})
	}
}

func TestInvalidAnnotationsAreDeniedNamingTheAnnotation(t *testing.T) {
	cases := map[string]struct {
		anno, value string
	}{
		"a CPU request that is not a quantity":     {AnnotationProxyCPU, "lots"},
		"a negative memory request":                {AnnotationProxyMemory, "-1Gi"},
		"a zero CPU limit":                         {AnnotationProxyCPULimit, "0"},
		"a memory limit with a unit typo":          {AnnotationProxyMemLimit, "1GB"},
		"an unknown log level":                     {AnnotationLogLevel, "verbose"},
		"an outbound include that is not a CIDR":   {AnnotationIncludeOutCIDRs, "10.0.0.0/33"},
		"a star in the outbound exclude list":      {AnnotationExcludeOutCIDRs, "*"},
		"an inbound port of zero":                  {AnnotationIncludeInPorts, "0"},
		"an inbound exclude port above 65535":      {AnnotationExcludeInPorts, "65536"},
		"an outbound exclude port that is a name":  {AnnotationExcludeOutPorts, "mysql"},
		"a proxy config that is not an object":     {AnnotationProxyConfig, "- 1"},
		"a proxy config asking for TPROXY":         {AnnotationProxyConfig, "interceptionMode: TPROXY"},
		"a proxy config overriding CA_ADDR":        {AnnotationProxyConfig, `{"proxyMetadata":{"CA_ADDR":"evil:15012"}}`},
		"a rewrite switch that is not a bool":      {AnnotationRewriteProbers, "sometimes"},
		"an unknown template":                      {AnnotationTemplates, "spire"},
		"two templates that cannot be combined":    {AnnotationTemplates, "sidecar,grpc-agent"},
		"the gateway template with the sidecar's":  {AnnotationTemplates, "gateway,sidecar"},
		"an empty entry in the template list":      {AnnotationTemplates, "gateway,"},
		"an empty template list":                   {AnnotationTemplates, " "},
		"a native sidecar switch that is not bool": {AnnotationNativeSidecar, "enabled"},
		"an image that is not a reference":         {AnnotationProxyImage, "docker.io/istio/proxyv2:1.28 --privileged"},
		"a request above its limit":                {AnnotationProxyCPU, "3"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			annos := map[string]string{tc.anno: tc.value}
			if name == "a request above its limit" {
				annos[AnnotationProxyCPULimit] = "2"
			}
			_, err := Inject(appPod(annos, nil), defaultParams(t))
			var ae *AnnotationError
			if !errors.As(err, &ae) || ae.Annotation != tc.anno {
				t.Fatalf("Inject error = %v, want an AnnotationError naming %s", err, tc.anno)
			}
		})
	}
}
