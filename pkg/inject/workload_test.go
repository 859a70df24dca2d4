package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWorkloadOf(t *testing.T) {
	yes := true
	ref := func(apiVersion, kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: &yes}}
	}
	cases := map[string]struct {
		meta  metav1.ObjectMeta
		owner string
		name  string
	}{
		"a bare pod is its own workload": {
			meta:  metav1.ObjectMeta{Name: "p"},
			owner: "kubernetes://apis/v1/namespaces/ns/pods/p", name: "p",
		},
		"a ReplicaSet with the template hash is a Deployment": {
			meta:  metav1.ObjectMeta{GenerateName: "web-5d4f-", Labels: map[string]string{"pod-template-hash": "5d4f"}, OwnerReferences: ref("apps/v1", "ReplicaSet", "web-5d4f")},
			owner: "kubernetes://apis/apps/v1/namespaces/ns/deployments/web", name: "web",
		},
		"a bare ReplicaSet stays a ReplicaSet": {
			meta:  metav1.ObjectMeta{GenerateName: "rs-", OwnerReferences: ref("apps/v1", "ReplicaSet", "rs")},
			owner: "kubernetes://apis/apps/v1/namespaces/ns/replicasets/rs", name: "rs",
		},
		"a StatefulSet pod belongs to the StatefulSet": {
			meta:  metav1.ObjectMeta{GenerateName: "db-", OwnerReferences: ref("apps/v1", "StatefulSet", "db")},
			owner: "kubernetes://apis/apps/v1/namespaces/ns/statefulsets/db", name: "db",
		},
		"a Job with a timestamp suffix belongs to its CronJob": {
			meta:  metav1.ObjectMeta{GenerateName: "n-28745160-", OwnerReferences: ref("batch/v1", "Job", "n-28745160")},
			owner: "kubernetes://apis/batch/v1/namespaces/ns/cronjobs/n", name: "n",
		},
		"an owner that is not the controller is ignored": {
			meta:  metav1.ObjectMeta{Name: "p", GenerateName: "p-", OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Thing", Name: "t"}}},
			owner: "kubernetes://apis/v1/namespaces/ns/pods/p", name: "p",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := workloadOf(&corev1.Pod{ObjectMeta: tc.meta}, "ns")
			if w.owner() != tc.owner || w.name != tc.name {
				t.Errorf("owner %s name %s, want %s %s", w.owner(), w.name, tc.owner, tc.name)
			}
		})
	}
}

func TestCanonicalLabels(t *testing.T) {
	w := workload{name: "wl"}
	cases := map[string]struct {
		labels        map[string]string
		name, version string
	}{
		"nothing set falls back to the workload and latest": {nil, "wl", "latest"},
		"app and version are used":                          {map[string]string{"app": "a", "version": "v1"}, "a", "v1"},
		"app.kubernetes.io labels win over app and version": {map[string]string{"app": "a", "app.kubernetes.io/name": "k", "version": "v1", "app.kubernetes.io/version": "kv"}, "k", "kv"},
		"explicit canonical labels win over everything":     {map[string]string{LabelCanonicalName: "c", "app": "a", LabelCanonicalRevision: "r"}, "c", "r"},
		"a long name is cut to 63 without a trailing dash":  {map[string]string{"app": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbb"}, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "latest"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := canonicalName(tc.labels, w); got != tc.name {
				t.Errorf("name = %q, want %q", got, tc.name)
			}
			if got := canonicalRevision(tc.labels); got != tc.version {
				t.Errorf("revision = %q, want %q", got, tc.version)
			}
		})
	}
}
