{{/* The chart name, overridable. */}}
{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A fully qualified name: the release name unless it already contains the chart name. */}}
{{- define "karpenter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "karpenter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "karpenter.labels" -}}
helm.sh/chart: {{ include "karpenter.chart" . }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels the Deployment selects its pods by; never change them between releases. */}}
{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "karpenter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image this chart runs by default. values.yaml has the same repository; it is repeated here because a
values file kept from upstream's chart replaces it (see "karpenter.controller.image"). */}}
{{- define "karpenter.defaultRepository" -}}
ghcr.io/karpenter-rs/karpenter-controller
{{- end }}

{{/* Repositories of upstream Karpenter's Go controller. This chart cannot run that image (other arguments, other
settings), so a values file that still names one of them (upstream's values.yaml does, with its tag and digest)
gets this chart's own image instead: its tag and digest belong to upstream's image and are ignored too. */}}
{{- define "karpenter.upstreamRepositories" -}}
{{- list "public.ecr.aws/karpenter/controller" "public.ecr.aws/karpenter/karpenter" | toJson }}
{{- end }}

{{/* True (non-empty) when controller.image.repository is upstream's. */}}
{{- define "karpenter.upstreamImage" -}}
{{- if has (toString .Values.controller.image.repository) (include "karpenter.upstreamRepositories" . | fromJsonArray) }}true{{ end }}
{{- end }}

{{/* True (non-empty) when controller.image.digest is one of upstream's released controller digests
(_upstream_digests.tpl): kept from upstream's values file, it names an image no other repository has. */}}
{{- define "karpenter.upstreamDigest" -}}
{{- if has (toString .Values.controller.image.digest) (include "karpenter.upstreamDigests" . | fromJsonArray) }}true{{ end }}
{{- end }}

{{/* The image reference, as upstream writes it: repository:tag, with @digest when a digest is set (the digest is
what the runtime pulls). An upstream repository is replaced by this chart's image at its appVersion; an upstream
digest with another repository is dropped. */}}
{{- define "karpenter.controller.image" -}}
{{- $image := .Values.controller.image }}
{{- if include "karpenter.upstreamImage" . }}
{{- printf "%s:%s" (include "karpenter.defaultRepository" .) .Chart.AppVersion }}
{{- else }}
{{- $ref := printf "%s:%s" $image.repository (toString ($image.tag | default .Chart.AppVersion)) }}
{{- if and $image.digest (not (include "karpenter.upstreamDigest" .)) }}
{{- $ref = printf "%s@%s" $ref $image.digest }}
{{- end }}
{{- $ref }}
{{- end }}
{{- end }}

{{/* metadata.annotations of every object: additionalAnnotations plus the object's own (`extra`, which wins on a
shared key); nothing when both are empty. Call with (dict "root" $ "extra" map-or-nil). */}}
{{- define "karpenter.annotations" -}}
{{- $merged := merge (dict) (deepCopy (.extra | default dict)) (deepCopy (.root.Values.additionalAnnotations | default dict)) }}
{{- with $merged }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The controller container's securityContext: a hardened base (non-root, no privilege escalation, read-only
root, no capabilities) with controller.securityContext laid over it. Upstream's values carry empty
appArmorProfile, seLinuxOptions and seccompProfile maps meaning "unset"; an empty map (or null) is left out,
since the API server refuses an empty profile. */}}
{{- define "karpenter.controller.securityContext" -}}
{{- $sc := dict "privileged" false "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "capabilities" (dict "drop" (list "ALL")) }}
{{- range $key, $value := .Values.controller.securityContext }}
{{- if not (or (kindIs "invalid" $value) (and (kindIs "map" $value) (empty $value))) }}
{{- $_ := set $sc $key $value }}
{{- end }}
{{- end }}
{{- toYaml $sc }}
{{- end }}

{{/* A setting's value as upstream renders it: run through `tpl` (so a value may reference other values or the
release), then quoted. Call with (list $ value). */}}
{{- define "karpenter.setting" -}}
{{- tpl (toString (index . 1)) (index . 0) | quote }}
{{- end }}

{{/* FEATURE_GATES as the controller parses it: Name=bool pairs separated by commas. */}}
{{- define "karpenter.featureGates" -}}
{{- $gates := .Values.settings.featureGates -}}
{{- printf "NodeRepair=%t,ReservedCapacity=%t,SpotToSpotConsolidation=%t,NodeOverlay=%t,StaticCapacity=%t,CapacityBuffer=%t,PodDeletionCostManagement=%t" $gates.nodeRepair $gates.reservedCapacity $gates.spotToSpotConsolidation $gates.nodeOverlay $gates.staticCapacity $gates.capacityBuffer (default false $gates.podDeletionCostManagement) }}
{{- end }}

{{/* AWS_FEATURE_GATES, the same way. */}}
{{- define "karpenter.awsFeatureGates" -}}
{{- $awsGates := .Values.settings.awsFeatureGates -}}
{{- printf "NodeClassCEL=%t,DRANVIDIAGPU=%t,DRAEFA=%t,RebootForRepair=%t" $awsGates.nodeClassCEL $awsGates.draNVIDIAGPU $awsGates.draEFA $awsGates.rebootForRepair }}
{{- end }}
