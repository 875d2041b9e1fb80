//! [`ZonalShiftApi`] over aws-sdk-arczonalshift.

use async_trait::async_trait;
use aws_sdk_arczonalshift::types::{AppliedStatus, AutoshiftAppliedStatus, ShiftType};

use super::api_error;
use crate::api_error::AwsApiError;
use crate::zonalshift::{AppliedShift, ShiftKind, ZonalShiftApi};

/// ARC zonal shift `GetManagedResource`.
#[derive(Clone, Debug)]
pub struct ZonalShiftAdapter {
    client: aws_sdk_arczonalshift::Client,
}

impl ZonalShiftAdapter {
    /// The adapter over `client`.
    pub fn new(client: aws_sdk_arczonalshift::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl ZonalShiftApi for ZonalShiftAdapter {
    async fn applied_shifts(&self, resource_arn: &str) -> Result<Vec<AppliedShift>, AwsApiError> {
        let out = self
            .client
            .get_managed_resource()
            .resource_identifier(resource_arn)
            .send()
            .await
            .map_err(|e| api_error("GetManagedResource", e))?;
        let shifts = out.zonal_shifts().iter().filter(|s| *s.applied_status() == AppliedStatus::Applied).map(|s| {
            let kind = match s.shift_type() {
                Some(ShiftType::PracticeRun) => ShiftKind::PracticeRun,
                Some(ShiftType::ZonalAutoshift) => ShiftKind::Autoshift,
                _ => ShiftKind::ZonalShift,
            };
            AppliedShift { away_from: s.away_from().to_owned(), kind, id: s.zonal_shift_id().to_owned() }
        });
        let autoshifts =
            out.autoshifts().iter().filter(|a| *a.applied_status() == AutoshiftAppliedStatus::Applied).map(|a| {
                AppliedShift { away_from: a.away_from().to_owned(), kind: ShiftKind::Autoshift, id: String::new() }
            });
        Ok(shifts.chain(autoshifts).collect())
    }
}
