package inject

import (
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// workload is the controller a pod belongs to, derived from owner
// references the way Istio does it.
type workload struct {
	name       string
	namespace  string
	apiVersion string
	kind       string
}

// A Job created by a CronJob is named <cronjob>-<8 to 11 digit timestamp>.
var cronJobNameRE = regexp.MustCompile(`^(.+)-\d{8,11}$`)

func workloadOf(pod *corev1.Pod, namespace string) workload {
	w := workload{name: pod.Name, namespace: namespace, apiVersion: "v1", kind: "Pod"}
	if pod.GenerateName != "" {
		for _, ref := range pod.OwnerReferences {
			if ref.Controller == nil || !*ref.Controller {
				continue
			}
			w.apiVersion, w.kind, w.name = ref.APIVersion, ref.Kind, ref.Name
			hash := pod.Labels["pod-template-hash"]
			switch {
			case ref.Kind == "ReplicaSet" && hash != "" && strings.HasSuffix(ref.Name, hash):
				w.name = strings.TrimSuffix(ref.Name, "-"+hash)
				w.kind = "Deployment"
				w.apiVersion = "apps/v1"
			case ref.Kind == "Job":
				if m := cronJobNameRE.FindStringSubmatch(ref.Name); len(m) == 2 {
					w.name, w.kind, w.apiVersion = m[1], "CronJob", "batch/v1"
				}
			}
			break
		}
	}
	if w.name == "" {
		w.name = pod.Name
	}
	return w
}

// owner is Istio's ISTIO_META_OWNER URI.
func (w workload) owner() string {
	ns := w.namespace
	if ns == "" {
		ns = "default"
	}
	return "kubernetes://apis/" + w.apiVersion + "/namespaces/" + ns + "/" + strings.ToLower(w.kind) + "s/" + w.name
}

// canonicalName follows Istio's label precedence, truncated to 63 bytes
// and trimmed of '-', '_' and '.' at both ends, as Istio's template does.
func canonicalName(lbls map[string]string, w workload) string {
	n := firstNonEmpty(lbls[LabelCanonicalName], lbls["app.kubernetes.io/name"], lbls["app"], w.name)
	if len(n) > 63 {
		n = n[:63]
	}
	return strings.Trim(n, "-_.")
}

func canonicalRevision(lbls map[string]string) string {
	return firstNonEmpty(lbls[LabelCanonicalRevision], lbls["app.kubernetes.io/version"], lbls["version"], "latest")
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
