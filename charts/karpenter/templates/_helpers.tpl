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

{{/* The image reference: a digest wins over a tag. */}}
{{- define "karpenter.controller.image" -}}
{{- if .Values.controller.image.digest }}
{{- printf "%s@%s" .Values.controller.image.repository .Values.controller.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.controller.image.repository (.Values.controller.image.tag | default .Chart.AppVersion) }}
{{- end }}
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
