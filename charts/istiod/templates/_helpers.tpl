{{/*
Naming. Istio's names are kept so that tools and habits carry over:
namespaced objects are istiod[-<revision>], cluster-scoped ones also carry
the namespace so that two installs never claim the same name. The revision
"default" is the same as no revision, as istiod itself treats it.
*/}}

{{/* The revision suffix: "" or "-<revision>". */}}
{{- define "istiod.revSuffix" -}}
{{- if and .Values.revision (ne .Values.revision "default") -}}
-{{ .Values.revision }}
{{- end -}}
{{- end -}}

{{/* The value of the istio.io/rev label. */}}
{{- define "istiod.revLabel" -}}
{{- .Values.revision | default "default" -}}
{{- end -}}

{{/* istiod[-<revision>]: Deployment, Service, ServiceAccount, Role. */}}
{{- define "istiod.name" -}}
istiod{{ include "istiod.revSuffix" . }}
{{- end -}}

{{/* istiod-clusterrole[-<revision>]-<namespace>: ClusterRole and ClusterRoleBinding. */}}
{{- define "istiod.clusterName" -}}
istiod-clusterrole{{ include "istiod.revSuffix" . }}-{{ .Release.Namespace }}
{{- end -}}

{{/* istio-reader-clusterrole[-<revision>]-<namespace>: the remote reader's ClusterRole and ClusterRoleBinding, as Istio names them. */}}
{{- define "istiod.readerName" -}}
istio-reader-clusterrole{{ include "istiod.revSuffix" . }}-{{ .Release.Namespace }}
{{- end -}}

{{/* istio-reader-primary-remote[-<revision>]: what a primary writes here. */}}
{{- define "istiod.primaryRemoteName" -}}
istio-reader-primary-remote{{ include "istiod.revSuffix" . }}
{{- end -}}

{{/* istio[-<revision>]: the mesh ConfigMap. */}}
{{- define "istiod.meshConfigMap" -}}
istio{{ include "istiod.revSuffix" . }}
{{- end -}}

{{/* istio-sidecar-injector[-<revision>]: the injector ConfigMap. */}}
{{- define "istiod.injectorConfigMap" -}}
istio-sidecar-injector{{ include "istiod.revSuffix" . }}
{{- end -}}

{{/*
istio-sidecar-injector[-<revision>][-<namespace>]: the mutating webhook. The
namespace is left out in istio-system, as Istio does.
*/}}
{{- define "istiod.mutatingWebhookName" -}}
istio-sidecar-injector{{ include "istiod.revSuffix" . }}
{{- if ne .Release.Namespace "istio-system" }}-{{ .Release.Namespace }}{{ end }}
{{- end -}}

{{/* istio-validator[-<revision>]-<namespace>: the validating webhook. */}}
{{- define "istiod.validatingWebhookName" -}}
istio-validator{{ include "istiod.revSuffix" . }}-{{ .Release.Namespace }}
{{- end -}}

{{/* The cluster ID: global.multiCluster.clusterName, else clusterID. */}}
{{- define "istiod.clusterID" -}}
{{- .Values.global.multiCluster.clusterName | default .Values.clusterID -}}
{{- end -}}

{{/* The address proxies reach istiod on: istiod[-<revision>].<ns>.svc:15012. */}}
{{- define "istiod.discoveryAddress" -}}
{{ include "istiod.name" . }}.{{ .Release.Namespace }}.svc:15012
{{- end -}}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "istiod.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels that select istiod's pods. Never change them: they are immutable in a Deployment. */}}
{{- define "istiod.selectorLabels" -}}
app: istiod
istio.io/rev: {{ include "istiod.revLabel" . | quote }}
{{- end -}}

{{/* Labels on every object of the chart. */}}
{{/* Labels of the remote reader's objects, as Istio's. */}}
{{- define "istiod.readerLabels" -}}
app: istio-reader
istio.io/rev: {{ include "istiod.revLabel" . | quote }}
app.kubernetes.io/name: istio-reader
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: bulwark
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "istiod.labels" -}}
app: istiod
istio: pilot
istio.io/rev: {{ include "istiod.revLabel" . | quote }}
app.kubernetes.io/name: istiod
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: bulwark
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
The injector webhook path: /inject, or /inject/cluster/<id>/net/<network>
when the install names a network or a cluster, so that injected proxies
carry them. On a remote cluster istiodRemote.injectionPath, when given,
is the path, as in Istio's chart.
*/}}
{{- define "istiod.injectPath" -}}
{{- $remotePath := "" -}}
{{- if eq (include "istiod.remote" .) "true" }}{{ $remotePath = (.Values.istiodRemote | default dict).injectionPath | default "" }}{{ end -}}
{{- if $remotePath -}}
{{ $remotePath }}
{{- else if or .Values.global.network .Values.global.multiCluster.clusterName -}}
/inject/cluster/{{ include "istiod.clusterID" . }}/net/{{ .Values.global.network }}
{{- else -}}
/inject
{{- end -}}
{{- end -}}

{{/*
A webhook's clientConfig. With webhook.url set (tests, istiod outside the
cluster) the API server calls that URL; otherwise it calls the Service.
On a remote cluster (istiod.remote) the "url" given, when there is one
(istiodRemote.injectionURL, base.validationURL), is called as it is, as
Istio's chart does. caBundle is never rendered: istiod (the primary's, on
a remote cluster) writes it, and a rendered empty value would wipe it on
every upgrade.
Call with (dict "root" $ "path" "/inject" "url" "").
*/}}
{{- define "istiod.clientConfig" -}}
{{- if .url -}}
url: {{ .url | quote }}
{{- else if .root.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.url) .path | quote }}
{{- else -}}
service:
  name: {{ include "istiod.name" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path | quote }}
  port: 443
{{- end }}
{{- end -}}

{{/*
The trust domain istiod runs with: the mesh config's, which istiod
requires --trust-domain to agree with.
*/}}
{{- define "istiod.trustDomain" -}}
{{- (include "istiod.meshConfig" . | fromJson).trustDomain -}}
{{- end -}}

{{/*
The effective MeshConfig: meshConfig from the values, with trustDomain,
rootNamespace and defaultConfig.discoveryAddress filled in where unset.
Rendered as JSON; callers convert it.
*/}}
{{- define "istiod.meshConfig" -}}
{{- $mesh := deepCopy .Values.meshConfig -}}
{{- if not (hasKey $mesh "trustDomain") }}{{ $_ := set $mesh "trustDomain" .Values.trustDomain }}{{ end -}}
{{- if not (hasKey $mesh "rootNamespace") }}{{ $_ := set $mesh "rootNamespace" .Release.Namespace }}{{ end -}}
{{- $proxy := $mesh.defaultConfig | default dict -}}
{{- if not (hasKey $proxy "discoveryAddress") }}{{ $_ := set $proxy "discoveryAddress" (include "istiod.discoveryAddress" .) }}{{ end -}}
{{- $_ := set $mesh "defaultConfig" $proxy -}}
{{- toJson $mesh -}}
{{- end -}}

{{/*
"true" when this release is the remote profile of a primary-remote mesh
(istiodRemote.enabled, as Istio's remote profile): no istiod runs here;
the webhooks call the primary's istiod, and the primary's reader may
write what the primary writes here. Anything else renders "".
*/}}
{{- define "istiod.remote" -}}
{{- if (.Values.istiodRemote | default dict).enabled -}}true{{- end -}}
{{- end -}}

{{/*
"true" when global.remotePilotAddress is an IP address: the istiod
Service then gets an EndpointSlice to it; a DNS name makes the Service
an ExternalName instead, as in Istio's chart.
*/}}
{{- define "istiod.remotePilotIsIP" -}}
{{- $a := .Values.global.remotePilotAddress | default "" -}}
{{- if or (regexMatch "^([0-9]{1,3}\\.){3}[0-9]{1,3}$" $a) (contains ":" $a) -}}true{{- end -}}
{{- end -}}
