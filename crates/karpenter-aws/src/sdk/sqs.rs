//! [`QueueApi`] over aws-sdk-sqs.

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageSystemAttributeName;

use super::api_error;
use crate::api_error::AwsApiError;
use crate::queue::{QueueApi, QueueMessage, ReceiveRequest};

/// SQS calls of the interruption queue.
#[derive(Clone, Debug)]
pub struct SqsAdapter {
    client: aws_sdk_sqs::Client,
}

impl SqsAdapter {
    /// The adapter over `client`.
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl QueueApi for SqsAdapter {
    async fn queue_url(&self, queue_name: &str) -> Result<String, AwsApiError> {
        let out =
            self.client.get_queue_url().queue_name(queue_name).send().await.map_err(|e| api_error("GetQueueUrl", e))?;
        out.queue_url().map(str::to_owned).ok_or_else(|| {
            AwsApiError::new("GetQueueUrl", "AWS.SimpleQueueService.NonExistentQueue", "no queue URL in the answer")
        })
    }

    async fn receive(&self, request: &ReceiveRequest) -> Result<Vec<QueueMessage>, AwsApiError> {
        let out = self
            .client
            .receive_message()
            .queue_url(&request.queue_url)
            .max_number_of_messages(request.max_messages)
            .wait_time_seconds(request.wait_time_seconds)
            .visibility_timeout(request.visibility_timeout_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(|e| api_error("ReceiveMessage", e))?;
        Ok(out
            .messages()
            .iter()
            .map(|m| QueueMessage {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                sent_timestamp_ms: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                    .and_then(|t| t.parse().ok()),
            })
            .collect())
    }

    async fn delete(&self, queue_url: &str, receipt_handle: &str) -> Result<(), AwsApiError> {
        self.client
            .delete_message()
            .queue_url(queue_url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| api_error("DeleteMessage", e))?;
        Ok(())
    }
}
