{{/*
Values files written for Istio's istiod chart (istio/istiod). Every template
includes "istiod.istioValues" first: once per render it lays the keys of
Istio's chart that mean something here over this chart's own keys, and
refuses the ones that would weaken security, with the reason. What has no
meaning here is listed by "istiod.ignoredValues" in NOTES.txt. The README's
"Istio values files" section is the table of all three.

Istio's own precedence is kept: pilot.<key> is the same as <key>, and a key
of Istio's chart, when given, wins over this chart's default for the same
setting.
*/}}

{{- define "istiod.istioValues" -}}
{{- $v := .Values -}}
{{- if not (hasKey $v "_istioValuesApplied") -}}
{{- $_ := set $v "_istioValuesApplied" true -}}
{{- range $key, $val := deepCopy ($v.pilot | default dict) -}}
{{- if and (kindIs "map" $val) (kindIs "map" (get $v $key)) -}}
{{- $_ := mustMergeOverwrite (get $v $key) $val -}}
{{- else -}}
{{- $_ := set $v $key $val -}}
{{- end -}}
{{- end -}}

{{- /* istiod's image is Bulwark's: Istio's pilot image name is ignored. */ -}}
{{- if kindIs "string" $v.image -}}
{{- $_ := set $v "image" (dict "repository" (include "istiod.defaultRepository" .) "tag" "" "pullPolicy" "IfNotPresent") -}}
{{- end -}}
{{- $g := $v.global -}}
{{- with $g.imagePullPolicy }}{{ $_ := set $v.image "pullPolicy" . }}{{ end -}}
{{- $_ := set $v "imagePullSecrets" (concat $v.imagePullSecrets ($g.imagePullSecrets | default list) | uniq) -}}
{{- if not $v.priorityClassName }}{{ $_ := set $v "priorityClassName" ($g.priorityClassName | default "") }}{{ end -}}

{{- if and $g.istioNamespace (ne $g.istioNamespace .Release.Namespace) -}}
{{- fail (printf "global.istioNamespace is %q but the release is installed in %q: istiod's namespace is the release's; install with --namespace %s or set global.istioNamespace to %s" $g.istioNamespace .Release.Namespace $g.istioNamespace .Release.Namespace) -}}
{{- end -}}

{{- /* The remote profile of a primary-remote mesh (Istio's profile=remote). */ -}}
{{- if eq (toString ($v.profile | default ($g.profile | default ""))) "remote" -}}
{{- $_ := set $v "istiodRemote" (mustMergeOverwrite ($v.istiodRemote | default dict) (dict "enabled" true)) -}}
{{- $_ := unset $v "profile" -}}{{- $_ := unset $g "profile" -}}
{{- end -}}
{{- $remote := $v.istiodRemote | default dict -}}
{{- if $remote.enabled -}}
{{- if $remote.enabledLocalInjectorIstiod -}}
{{- fail "istiodRemote.enabledLocalInjectorIstiod: true is not supported: a remote cluster runs no istiod of its own; its pods are injected and served by the primary's istiod (leave it unset, or install this chart without istiodRemote.enabled for an istiod here)" -}}
{{- end -}}
{{- if not (or $g.remotePilotAddress $remote.injectionURL $v.webhook.url) -}}
{{- fail "istiodRemote.enabled (the remote profile) installs no istiod here, and nothing says where the primary's istiod is: set global.remotePilotAddress (the address of the primary's istiod, or of the east-west gateway exposing it on 15012 and 15017) or istiodRemote.injectionURL; without one the injection webhook would call an istiod Service that does not exist and every injected pod would be refused" -}}
{{- end -}}
{{- end -}}

{{- /* Autoscaling and disruption budget. */ -}}
{{- $as := $v.autoscaling -}}
{{- if hasKey $v "autoscaleEnabled" }}{{ $_ := set $as "enabled" $v.autoscaleEnabled }}{{ end -}}
{{- if hasKey $v "autoscaleMin" }}{{ $_ := set $as "minReplicas" $v.autoscaleMin }}{{ end -}}
{{- if hasKey $v "autoscaleMax" }}{{ $_ := set $as "maxReplicas" $v.autoscaleMax }}{{ end -}}
{{- with $v.autoscaleBehavior }}{{ $_ := set $as "behavior" . }}{{ end -}}
{{- with ($v.cpu | default dict).targetAverageUtilization }}{{ $_ := set $as "targetCPUUtilizationPercentage" . }}{{ end -}}
{{- with ($v.memory | default dict).targetAverageUtilization }}{{ $_ := set $as "targetMemoryUtilizationPercentage" . }}{{ end -}}
{{- $pdb := $v.podDisruptionBudget -}}
{{- with $v.pdb -}}
{{- with .minAvailable }}{{ $_ := set $pdb "minAvailable" . }}{{ end -}}
{{- with .unhealthyPodEvictionPolicy }}{{ $_ := set $pdb "unhealthyPodEvictionPolicy" . }}{{ end -}}
{{- end -}}
{{- if hasKey ($g.defaultPodDisruptionBudget | default dict) "enabled" }}{{ $_ := set $pdb "enabled" $g.defaultPodDisruptionBudget.enabled }}{{ end -}}

{{- /* Webhooks and injection. */ -}}
{{- if hasKey $g "configValidation" }}{{ $_ := set $v.webhook "validation" $g.configValidation }}{{ end -}}
{{- $inj := $v.sidecarInjectorWebhook -}}
{{- with $inj.reinvocationPolicy }}{{ $_ := set $v.webhook "reinvocationPolicy" . }}{{ end -}}
{{- if not $inj.defaultTemplates }}{{ $_ := set $inj "defaultTemplates" (list "sidecar") }}{{ end -}}
{{- with ($g.proxy | default dict).autoInject }}{{ $_ := set $inj "policy" . }}{{ end -}}
{{- if ($g.networkPolicy | default dict).enabled }}{{ $_ := set $v.networkPolicy "enabled" true }}{{ end -}}
{{- if and $g.meshNetworks (not $v.meshNetworks) }}{{ $_ := set $v "meshNetworks" $g.meshNetworks }}{{ end -}}

{{- /* Security: what would weaken it is refused, never ignored. */ -}}
{{- if $g.proxy.privileged -}}
{{- fail "global.proxy.privileged: true is refused: a privileged istio-proxy has every capability on its node; the injector never runs it privileged" -}}
{{- end -}}
{{- if $g.proxy.enableCoreDump -}}
{{- fail "global.proxy.enableCoreDump: true is refused: it injects a privileged init container that rewrites the node's core_pattern" -}}
{{- end -}}
{{- if eq ($g.jwtPolicy | default "") "first-party-jwt" -}}
{{- fail "global.jwtPolicy: first-party-jwt is refused: istiod accepts only audience-bound (third-party) service-account tokens" -}}
{{- end -}}
{{- range $key, $sp := dict "seccompProfile" $v.seccompProfile "global.proxy.seccompProfile" $g.proxy.seccompProfile -}}
{{- if eq (($sp | default dict).type | default "") "Unconfined" -}}
{{- fail (printf "%s.type: Unconfined is refused: it turns off the system-call filter" $key) -}}
{{- end -}}
{{- end -}}
{{- with $v.seccompProfile }}{{ $_ := set $v.securityContext "seccompProfile" . }}{{ end -}}

{{- /* pilot.env: the variables istiod reads, as Istio's istiod reads them. */ -}}
{{- $env := $v.env | default dict -}}
{{- range $name, $why := include "istiod.refusedEnv" . | fromYaml -}}
{{- if hasKey $env $name -}}
{{- $val := toString (get $env $name) -}}
{{- if or (and (hasPrefix "=" $why.when) (eq $val (trimPrefix "=" $why.when))) (and (eq $why.when "set") $val) -}}
{{- fail (printf "env %s=%s is refused: %s" $name $val $why.reason) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with $env.CLUSTER_ID }}{{ $_ := set $v "clusterID" (toString .) }}{{ end -}}
{{- with $env.JWT_RULE }}{{ $_ := set $v "jwtRule" (toString .) }}{{ end -}}
{{- with $env.TOKEN_AUDIENCES }}{{ $_ := set $v "tokenAudiences" (splitList "," (toString .)) }}{{ end -}}
{{- $args := $v.extraArgs -}}
{{- range $name, $flag := include "istiod.envFlags" . | fromYaml -}}
{{- with get $env $name }}{{ $args = append $args (printf "--%s=%s" $flag (toString .)) }}{{ end -}}
{{- end -}}
{{- $_ := set $v "extraArgs" $args -}}
{{- end -}}
{{- end -}}

{{/* The default of image.repository in values.yaml. */}}
{{- define "istiod.defaultRepository" -}}
ghcr.io/bulwark-mesh/istiod
{{- end -}}

{{/*
Istio's environment variables that istiod maps to a flag. CLUSTER_ID,
JWT_RULE and TOKEN_AUDIENCES set this chart's clusterID, jwtRule and
tokenAudiences instead.
*/}}
{{- define "istiod.envFlags" -}}
DEFAULT_WORKLOAD_CERT_TTL: workload-cert-ttl
MAX_WORKLOAD_CERT_TTL: max-workload-cert-ttl
CITADEL_SELF_SIGNED_CA_CERT_TTL: root-ttl
CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE: root-grace-percentile
ISTIOD_CUSTOM_HOST: serving-dns-names
PILOT_REMOTE_CLUSTER_TIMEOUT: remote-cluster-timeout
PILOT_SCOPE_GATEWAY_TO_NAMESPACE: scope-gateway-to-namespace
ENABLE_TLS_ON_SIDECAR_INGRESS: tls-on-sidecar-ingress
EXTERNAL_ISTIOD: external-istiod
{{- end -}}

{{/*
Istio's environment variables whose value turns a security check off:
"when" is "=<value>" for that value, "set" for any non-empty one.
*/}}
{{- define "istiod.refusedEnv" -}}
XDS_AUTH:
  when: "=false"
  reason: xDS clients are always authenticated
PILOT_ENABLE_XDS_IDENTITY_CHECK:
  when: "=false"
  reason: a proxy is always checked to be the workload it claims
PILOT_SKIP_VALIDATE_TRUST_DOMAIN:
  when: "=true"
  reason: peers' trust domains are always checked
JWT_POLICY:
  when: "=first-party-jwt"
  reason: istiod accepts only audience-bound (third-party) service-account tokens
CA_TRUSTED_NODE_ACCOUNTS:
  when: set
  reason: no caller may ask for another identity's certificate
{{- end -}}

{{/*
The keys of Istio's chart given in the values that have no meaning here,
one "key: reason" line each. Keys given empty (false, "", {}, []) are
left out: they ask for nothing.
*/}}
{{- define "istiod.ignoredValues" -}}
{{- $v := .Values -}}
{{- $lines := list -}}
{{- range $group := include "istiod.ignoredKeys" . | fromYamlArray -}}
{{- range $path := $group.keys -}}
{{- $val := $v -}}
{{- range splitList "." $path -}}
{{- if kindIs "map" $val }}{{ $val = get $val . }}{{ else }}{{ $val = "" }}{{ end -}}
{{- end -}}
{{- if $val -}}
{{- $lines = append $lines (printf "%s: %s" $path $group.reason) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $parent, $known := dict "istiodRemote" (list "enabled" "injectionURL" "injectionPath" "injectionCABundle" "enabledLocalInjectorIstiod") "base" (list "validationURL") -}}
{{- $m := get $v $parent -}}
{{- if kindIs "map" $m -}}
{{- range $k := keys $m | sortAlpha -}}
{{- if and (not (has $k $known)) (get $m $k) -}}
{{- $lines = append $lines (printf "%s.%s: not read" $parent $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if kindIs "map" $v.env -}}
{{- $known := concat (list "CLUSTER_ID" "JWT_RULE" "TOKEN_AUDIENCES") (keys (include "istiod.envFlags" . | fromYaml)) -}}
{{- range $name := keys $v.env | sortAlpha -}}
{{- if not (has $name $known) -}}
{{- $lines = append $lines (printf "env.%s: istiod does not read it" $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{/* Keys of Istio's chart that have no meaning here, by reason. */}}
{{- define "istiod.ignoredKeys" -}}
- reason: istiod's image is image.repository and image.tag (global.hub and global.tag set the proxies' images)
  keys: [hub, tag, variant, global.variant]
- reason: Bulwark configures no telemetry or tracing
  keys: [traceSampling, telemetry, global.tracer, global.proxy.tracer, global.proxy.outlierLogPath]
- reason: the injector adds istio-init; Istio CNI and nftables are not supported
  keys: [cni, istio_cni, taint, global.nativeNftables, global.proxy_init.forceApplyIptables, global.proxy_init.resources]
- reason: ambient mode, waypoints and gateways are not part of this chart
  keys: [ztunnel, trustedZtunnelNamespace, trustedZtunnelName, gateways, gatewayClasses, global.waypoint, global.agentgateway, global.defaultResources, global.defaultNodeSelector, global.defaultTolerations]
{{- if eq (include "istiod.remote" .) "true" }}
- reason: the remote profile installs no mesh ConfigMap; the primary's istiod injects with its own mesh config
  keys: [configMap]
{{- else }}
- reason: read only with istiodRemote.enabled (the remote profile); istiod runs in this cluster and its webhooks call it
  keys: [istiodRemote.injectionURL, istiodRemote.injectionPath, global.remotePilotAddress, base.validationURL]
- reason: istiod always runs in the cluster it is installed in, with its own ConfigMaps and webhooks
  keys: [configMap, global.omitSidecarInjectorConfigMap]
{{- end }}
- reason: istiod writes the webhooks' caBundle (the primary's istiod, on a remote cluster)
  keys: [istiodRemote.injectionCABundle]
- reason: an istiod local to a remote cluster (injection here, xDS from the primary) is not supported
  keys: [istiodRemote.enabledLocalInjectorIstiod]
- reason: istiod reads Istio configuration from its own cluster only; a remote cluster is never a config cluster
  keys: [global.configCluster]
- reason: the chart owns the webhook configurations; istiod keeps only their caBundle
  keys: [global.operatorManageWebhooks, sidecarInjectorWebhook.injectionURL]
- reason: revision tags are not supported; label namespaces istio.io/rev=<revision>
  keys: [revisionTags, defaultRevision]
- reason: istiod's flags and files are not pilot-discovery's; use extraArgs
  keys: [extraContainerArgs, envVarFrom, volumes, volumeMounts, initContainers, keepaliveMaxServerConnectionAge, crlConfigMapName]
- reason: istiod is the mesh's only CA and signs with the root it holds
  keys: [global.certSigners, global.caName, global.sts, global.mountMtlsCerts, global.trustBundleName]
- reason: keys of RequestAuthentication's key fetching are not read
  keys: [jwksResolverExtraRootCA]
- reason: the injector has only its built-in templates (sidecar, grpc-agent)
  keys: [sidecarInjectorWebhook.templates]
- reason: namespaces are injected only when labelled
  keys: [sidecarInjectorWebhook.enableNamespacesByDefault]
- reason: the injector does not set it
  keys: [global.proxy.includeOutboundPorts, global.proxy.lifecycle, global.proxy.seccompProfile, global.podDNSSearchNamespaces]
- reason: Istio's profiles are Istio's files; pass the profile's values with -f
  keys: [profile, compatibilityVersion, platform, global.profile, global.platform, defaults, _internal_defaults_do_not_set]
- reason: not used by this chart
  keys: [enabled, experimental, ownerName, global.arch, global.istiod, global.resourceScope, global.revision, global.ipFamilies, global.ipFamilyPolicy]
{{- end -}}
