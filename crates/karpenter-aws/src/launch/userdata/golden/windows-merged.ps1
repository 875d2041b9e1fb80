<powershell>
Write-Host 'before'
[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\Amazon\EKS\Start-EKSBootstrap.ps1"
& $EKSBootstrapScriptFile -EKSClusterName 'my-cluster' -APIServerEndpoint 'https://ABC.gr7.us-west-2.eks.amazonaws.com' -Base64ClusterCA 'Q0EtQlVORExF' -KubeletExtraArgs '--node-labels="karpenter.sh/capacity-type=on-demand,karpenter.sh/nodepool=default" --register-with-taints="dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute" --max-pods=29 --kube-reserved="cpu=100m" --eviction-hard="memory.available<5%"' -DNSClusterIP '10.100.0.10'
</powershell>
