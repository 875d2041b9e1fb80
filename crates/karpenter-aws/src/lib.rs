//! The AWS CloudProvider: instance-type catalogue (SDK-free), and behind the sdk feature EC2NodeClass resolution, launches, pricing and interruption
