package inject

import (
	corev1 "k8s.io/api/core/v1"
)

// Volume names and mount paths, as Istio's sidecar template has them.
const (
	volWorkloadSocket   = "workload-socket"
	volCredentialSocket = "credential-socket"
	volWorkloadCerts    = "workload-certs"
	volEnvoy            = "istio-envoy"
	volXDS              = "istio-xds"
	volData             = "istio-data"
	volPodInfo          = "istio-podinfo"
	volToken            = "istio-token"
	volCACert           = "istiod-ca-cert"

	caRootConfigMap = "istio-ca-root-cert"
	tokenExpiry     = 43200
)

func emptyDir(name string, medium corev1.StorageMedium) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium}}}
}

func podInfoVolume() corev1.Volume {
	return corev1.Volume{Name: volPodInfo, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
		},
	}}}
}

func tokenVolume(audience string) corev1.Volume {
	return corev1.Volume{Name: volToken, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: audience, ExpirationSeconds: ptrTo[int64](tokenExpiry), Path: volToken,
		}}},
	}}}
}

func caCertVolume() corev1.Volume {
	return corev1.Volume{Name: volCACert, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: caRootConfigMap},
	}}}
}

// sidecarVolumes are the pod volumes the sidecar template adds, in Istio's order.
func sidecarVolumes(v *Values) []corev1.Volume {
	return []corev1.Volume{
		emptyDir(volWorkloadSocket, ""),
		emptyDir(volCredentialSocket, ""),
		emptyDir(volWorkloadCerts, ""),
		emptyDir(volEnvoy, corev1.StorageMediumMemory),
		emptyDir(volData, ""),
		podInfoVolume(),
		tokenVolume(v.Global.SDS.Token.Aud),
		caCertVolume(),
	}
}

func sidecarMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: volWorkloadSocket, MountPath: "/var/run/secrets/workload-spiffe-uds"},
		{Name: volCredentialSocket, MountPath: "/var/run/secrets/credential-uds"},
		{Name: volWorkloadCerts, MountPath: "/var/run/secrets/workload-spiffe-credentials"},
		{Name: volCACert, MountPath: "/var/run/secrets/istio"},
		{Name: volData, MountPath: "/var/lib/istio/data"},
		{Name: volEnvoy, MountPath: "/etc/istio/proxy"},
		{Name: volToken, MountPath: "/var/run/secrets/tokens"},
		{Name: volPodInfo, MountPath: "/etc/istio/pod"},
	}
}

// grpcAgentVolumes are the volumes of the proxyless gRPC template.
func grpcAgentVolumes(v *Values) []corev1.Volume {
	return []corev1.Volume{
		emptyDir(volWorkloadSocket, ""),
		emptyDir(volWorkloadCerts, ""),
		emptyDir(volXDS, corev1.StorageMediumMemory),
		emptyDir(volData, ""),
		podInfoVolume(),
		tokenVolume(v.Global.SDS.Token.Aud),
		caCertVolume(),
	}
}

func grpcAgentMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: volWorkloadSocket, MountPath: "/var/run/secrets/workload-spiffe-uds"},
		{Name: volWorkloadCerts, MountPath: "/var/run/secrets/workload-spiffe-credentials"},
		{Name: volCACert, MountPath: "/var/run/secrets/istio"},
		{Name: volData, MountPath: outputCertsDir},
		{Name: volXDS, MountPath: "/etc/istio/proxy"},
		{Name: volToken, MountPath: "/var/run/secrets/tokens"},
		{Name: volPodInfo, MountPath: "/etc/istio/pod"},
	}
}

// grpcAppMounts are added to every app container of a proxyless gRPC pod:
// the agent's certificates and the xDS bootstrap.
func grpcAppMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: volData, MountPath: outputCertsDir},
		{Name: volXDS, MountPath: "/etc/istio/proxy"},
		{Name: volWorkloadCerts, MountPath: "/var/run/secrets/workload-spiffe-credentials"},
	}
}
